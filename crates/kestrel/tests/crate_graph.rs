//! The crate graph in docs/contributing/architecture.md is the one the `Cargo.toml` files
//! declare: each workspace crate's `[dependencies]` on the others (what `cargo tree -e
//! normal --depth 1` shows), optional ones with the feature that enables them; and no
//! source file runs past 1,000 lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace members' directories, from the root `Cargo.toml`.
fn members() -> Vec<String> {
    let root = read(&repo().join("Cargo.toml"));
    let line = root
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace Cargo.toml");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Lines of `section` (`[dependencies]`, ...) of a `Cargo.toml`, comments dropped.
fn section<'a>(toml: &'a str, name: &str) -> Vec<&'a str> {
    let mut inside = false;
    let mut lines = Vec::new();
    for line in toml.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == name;
            continue;
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            lines.push(line);
        }
    }
    lines
}

/// A crate's name and its dependencies on workspace crates, as the doc writes them.
fn declared(dir: &str) -> (String, Vec<String>) {
    let toml = read(&repo().join(dir).join("Cargo.toml"));
    let name = section(&toml, "[package]")
        .into_iter()
        .find_map(|l| l.strip_prefix("name = "))
        .expect("a package name")
        .trim_matches('"')
        .to_string();
    let features = section(&toml, "[features]");
    let mut deps: Vec<String> = section(&toml, "[dependencies]")
        .into_iter()
        .filter(|l| l.starts_with("kestrel-"))
        .map(|l| {
            let dep = l.split(['.', ' ', '=']).next().unwrap().to_string();
            if !l.contains("optional = true") {
                return dep;
            }
            let feature = features
                .iter()
                .find(|f| f.contains(&format!("\"dep:{dep}\"")))
                .and_then(|f| f.split(' ').next())
                .unwrap_or_else(|| panic!("{name}: no feature enables the optional {dep}"));
            format!("{dep} (feature {feature})")
        })
        .collect();
    deps.sort();
    (name, deps)
}

/// The `name -> deps` lines of the block after `<!-- crate-graph -->` in the doc.
fn documented() -> BTreeMap<String, Vec<String>> {
    let doc = read(&repo().join("docs/contributing/architecture.md"));
    let (_, after) = doc
        .split_once("<!-- crate-graph -->")
        .expect("the crate-graph marker in docs/contributing/architecture.md");
    let block = after
        .split("```")
        .nth(1)
        .expect("a fenced block after the marker");
    block
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (name, deps) = l
                .split_once("->")
                .unwrap_or_else(|| panic!("not `crate -> deps`: {l:?}"));
            let mut deps: Vec<String> = deps
                .split(',')
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty())
                .collect();
            deps.sort();
            (name.trim().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_architecture_doc_shows_the_crate_graph_the_manifests_declare() {
    let declared: BTreeMap<String, Vec<String>> =
        members().iter().map(|dir| declared(dir)).collect();
    assert!(declared.len() >= 10, "{declared:?}");
    let documented = documented();
    for (name, deps) in &declared {
        assert_eq!(
            documented.get(name),
            Some(deps),
            "docs/contributing/architecture.md's crate graph for {name}: the Cargo.toml \
             declares {deps:?}"
        );
    }
    let unknown: Vec<&String> = documented
        .keys()
        .filter(|k| !declared.contains_key(*k))
        .collect();
    assert!(unknown.is_empty(), "not workspace crates: {unknown:?}");
}

#[test]
fn the_simulator_and_the_live_scheduler_do_not_depend_on_each_other() {
    let deps = |dir: &str| declared(dir).1;
    assert!(
        !deps("crates/kestrel-live")
            .iter()
            .any(|d| d.starts_with("kestrel-sim")),
        "kestrel-live links the simulator"
    );
    assert!(
        !deps("crates/kestrel-sim")
            .iter()
            .any(|d| d.starts_with("kestrel-live")),
        "kestrel-sim links the live scheduler"
    );
    let kube = read(&repo().join("crates/kestrel-live/Cargo.toml"));
    assert!(
        !section(&kube, "[dev-dependencies]")
            .iter()
            .any(|l| l.starts_with("kestrel-sim")),
        "kestrel-live's tests link the simulator"
    );
    // The binary links the test control plane only for `bench live`.
    assert!(deps("crates/kestrel").contains(&"kestrel-testenv (feature bench-live)".into()));
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Files with one job each: no Rust file of the workspace, code or test, runs past 1,000
/// lines (split it along its seams into a module directory).
#[test]
fn no_source_file_is_over_a_thousand_lines() {
    const MAX_LINES: usize = 1_000;
    let mut files = Vec::new();
    for member in members() {
        rust_files(&repo().join(member), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = read(f).lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}
