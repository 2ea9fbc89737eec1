//! The generated references in `docs/reference/` are what the code says.
//!
//! - `docs/reference/cli.md`: the `--help` of `kestrel` and of every command and
//!   subcommand under it, found by walking the `Commands:` lists of the binary's own help.
//! - `docs/reference/crds.md`: Kestrel's CRDs as `kestrel crds` prints them (the same
//!   `kestrel_live::deploy::crd_objects`), per kind its names and every schema field.
//!
//! Regenerate both after changing a command's help or a CRD's Rust type:
//! `KESTREL_BLESS=1 cargo test -p kestrel --test cli_reference`.

use kestrel_live::deploy::crd_objects;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const BLESS: &str = "KESTREL_BLESS=1 cargo test -p kestrel --test cli_reference";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compares a committed generated page with the code's output; with `KESTREL_BLESS=1`
/// writes the output instead.
fn check_generated(path: &str, generated: &str) {
    let file = root().join(path);
    if std::env::var_os("KESTREL_BLESS").is_some() {
        std::fs::write(&file, generated).unwrap_or_else(|e| panic!("{path}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{path}: {e}"));
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "{path} drifted from the code (first difference at line {}): regenerate it with `{BLESS}`",
            line + 1
        );
    }
}

/// `kestrel <path> --help`, in an empty environment: no variable (such as
/// `MLFLOW_TRACKING_URI`, which clap would show as the value of an `env` argument) and no
/// terminal width changes the text. Trailing blanks are trimmed.
fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(path)
        .arg("--help")
        .env_clear()
        .output()
        .expect("run kestrel");
    assert!(
        out.status.success(),
        "kestrel {} --help: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("help is UTF-8");
    let mut trimmed: String = text
        .lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect();
    while trimmed.ends_with("\n\n") {
        trimmed.pop();
    }
    trimmed
}

/// The subcommands a help text lists under `Commands:`, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let rest = l.strip_prefix("  ")?;
            if rest.starts_with(' ') {
                return None; // a continuation line
            }
            rest.split_whitespace().next().map(str::to_string)
        })
        .filter(|name| name != "help")
        .collect()
}

/// Every command from `path` down, depth first in the order the help lists them.
fn walk(path: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let text = help(&path);
    let children = subcommands(&text);
    out.push((path.clone(), text));
    for child in children {
        let mut next = path.clone();
        next.push(child);
        walk(next, out);
    }
}

/// GitHub's anchor for a heading text.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn render_cli() -> String {
    let mut commands = Vec::new();
    walk(Vec::new(), &mut commands);
    assert!(
        commands.len() > 10,
        "too few commands found: {}",
        commands.len()
    );
    let mut md = String::new();
    md.push_str(
        "# Command line reference\n\n\
         <!-- Generated from the code by `KESTREL_BLESS=1 cargo test -p kestrel --test cli_reference`; do not edit. -->\n\n\
         This page is the reference for every command of the `kestrel` binary: the `--help` of\n\
         each command and subcommand, generated from the code, so it is always the binary's own\n\
         text. What the commands are for is explained in the concepts and tasks pages; start at\n\
         the [documentation map](../README.md).\n\n\
         ## Commands\n\n",
    );
    for (path, _) in &commands {
        let name = command_name(path);
        let depth = path.len().saturating_sub(1);
        let _ = writeln!(md, "{}- [`{name}`](#{})", "  ".repeat(depth), anchor(&name));
    }
    for (path, text) in &commands {
        let _ = write!(md, "\n## {}\n\n```text\n{text}```\n", command_name(path));
    }
    md
}

fn command_name(path: &[String]) -> String {
    std::iter::once("kestrel".to_string())
        .chain(path.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn cli_reference_matches_the_binary() {
    check_generated("docs/reference/cli.md", &render_cli());
}

/// Markdown table text: one line, pipes escaped, `<` and `>` outside code spans escaped.
fn cell(text: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    for c in text.replace('\n', " ").chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// A schema's type in words: `integer (int32)`, `array of string`, `map of quantity`.
fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "quantity (integer or string)".into();
    }
    let base = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("any")
        .to_string();
    match base.as_str() {
        "array" => format!(
            "array of {}",
            schema.get("items").map_or("any".into(), type_of)
        ),
        "object" => match schema.get("additionalProperties") {
            Some(values) if values.is_object() => format!("map of {}", type_of(values)),
            _ => "object".into(),
        },
        _ => match schema.get("format").and_then(Value::as_str) {
            Some(format) => format!("{base} ({format})"),
            None => base,
        },
    }
}

/// What else a field's schema says: required, enum, bounds, default.
fn constraints(schema: &Value, required: bool) -> String {
    let mut parts = Vec::new();
    if required {
        parts.push("required".to_string());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().map_or(v.to_string(), str::to_string)))
            .collect();
        parts.push(format!("one of {}", values.join(", ")));
    }
    let number = |v: &Value| match v.as_f64() {
        Some(f) if f.fract() == 0.0 => format!("{}", f as i64),
        _ => v.to_string(),
    };
    if let Some(min) = schema.get("minimum") {
        parts.push(format!("minimum {}", number(min)));
    }
    if let Some(max) = schema.get("maximum") {
        parts.push(format!("maximum {}", number(max)));
    }
    if let Some(min) = schema.get("minItems") {
        parts.push(format!("at least {} items", number(min)));
    }
    if let Some(default) = schema.get("default") {
        parts.push(format!("default `{default}`"));
    }
    parts.join("; ")
}

/// One table row per field under `schema`, depth first, fields by name.
fn fields(prefix: &str, schema: &Value, rows: &mut Vec<String>) {
    let properties = match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            if let Some(items) = schema.get("items") {
                fields(&format!("{prefix}[]"), items, rows);
            }
            return;
        }
        _ => match schema.get("additionalProperties") {
            Some(values) if values.get("properties").is_some() => {
                fields(&format!("{prefix}.*"), values, rows);
                return;
            }
            _ => schema.get("properties").and_then(Value::as_object),
        },
    };
    let Some(properties) = properties else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort();
    for name in names {
        let field = &properties[name];
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let description = field
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        rows.push(format!(
            "| `{path}` | {} | {} | {} |",
            cell(&type_of(field)),
            cell(&constraints(field, required.contains(&name.as_str()))),
            cell(description)
        ));
        fields(&path, field, rows);
    }
}

fn render_crds() -> String {
    let crds = crd_objects();
    let mut md = String::from(
        "# CRD reference\n\n\
         <!-- Generated from the code by `KESTREL_BLESS=1 cargo test -p kestrel --test cli_reference`; do not edit. -->\n\n\
         This page is the reference for Kestrel's CustomResourceDefinitions, as `kestrel crds`\n\
         prints them from the Rust types in `crates/kestrel-objects/src/crds.rs`: per kind its group,\n\
         version, scope and names, and every field of its schema with its type, the rules the API\n\
         server checks (required, enums, bounds, defaults), and its description. How each kind is used: [gangs](../concepts/gangs-and-topology.md)\n\
         (PodGroup, Topology), [team queues](../concepts/queues-and-preemption.md) (ClusterQueue,\n\
         LocalQueue, Cohort, ResourceFlavor), [drains](../tasks/drains-and-upgrades.md)\n\
         (NodeMaintenance), [training jobs](../concepts/training-jobs.md) (TrainingJob). Apply\n\
         them with `kestrel crds | kubectl apply --server-side -f -`.\n\n\
         | kind | group/version | scope | plural | short names |\n|---|---|---|---|---|\n",
    );
    let kind_of = |crd: &Value| {
        crd["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    for crd in &crds {
        let spec = &crd["spec"];
        let versions: Vec<&str> = spec["versions"]
            .as_array()
            .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
            .unwrap_or_default();
        let short: Vec<String> = spec["names"]["shortNames"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(|s| format!("`{s}`"))
                    .collect()
            })
            .unwrap_or_default();
        let kind = kind_of(crd);
        let _ = writeln!(
            md,
            "| [`{kind}`](#{}) | `{}/{}` | {} | `{}` | {} |",
            kind.to_lowercase(),
            spec["group"].as_str().unwrap_or(""),
            versions.join("`, `"),
            spec["scope"].as_str().unwrap_or(""),
            spec["names"]["plural"].as_str().unwrap_or(""),
            short.join(", ")
        );
    }
    for crd in &crds {
        let spec = &crd["spec"];
        let _ = write!(md, "\n## {}\n", kind_of(crd));
        for version in spec["versions"].as_array().into_iter().flatten() {
            let schema = &version["schema"]["openAPIV3Schema"];
            let _ = write!(
                md,
                "\n`{}/{}`, {}; served: {}, stored: {}.\n\n",
                spec["group"].as_str().unwrap_or(""),
                version["name"].as_str().unwrap_or(""),
                spec["scope"].as_str().unwrap_or("").to_lowercase(),
                version["served"],
                version["storage"]
            );
            if let Some(description) = schema.get("description").and_then(Value::as_str) {
                let _ = writeln!(md, "{}", description.replace('\n', " "));
            }
            if let Some(columns) = version["additionalPrinterColumns"].as_array() {
                let columns: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        format!(
                            "{} (`{}`)",
                            c["name"].as_str().unwrap_or(""),
                            c["jsonPath"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                let _ = writeln!(md, "\n`kubectl get` columns: {}.", columns.join(", "));
            }
            if let Some(subresources) = version["subresources"].as_object() {
                let mut names: Vec<&String> = subresources.keys().collect();
                names.sort();
                let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
                let _ = writeln!(md, "\nSubresources: {}.", names.join(", "));
            }
            let mut rows = Vec::new();
            fields("", schema, &mut rows);
            md.push_str("\n| field | type | schema | description |\n|---|---|---|---|\n");
            for row in rows {
                md.push_str(&row);
                md.push('\n');
            }
        }
    }
    md
}

#[test]
fn crd_reference_matches_the_code() {
    check_generated("docs/reference/crds.md", &render_crds());
}
