//! YAML as Kestrel reads it: limits sized for real inputs (a `kubectl get nodes -o yaml`
//! dump of 10,000 nodes, a workload file of 100,000 objects) instead of the parser's
//! defaults, which refuse a 1,000-node dump, and errors in Kestrel's words: a file past a
//! limit is named as too large, never as "not valid YAML".

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Budget, Error, Options};

/// How much one file may hold.
#[derive(Debug, Clone, Copy)]
struct Limits {
    documents: usize,
    /// YAML nodes (mappings, sequences and scalars): a real Node object in `kubectl get
    /// -o yaml` output is a few hundred to a few thousand.
    nodes: usize,
    /// Parser events (about two per node).
    events: usize,
    /// Bytes of scalar text.
    scalar_bytes: usize,
}

const LIMITS: Limits = Limits {
    documents: 1_000_000,
    nodes: 50_000_000,
    events: 120_000_000,
    scalar_bytes: 2 << 30,
};

fn options(limits: &Limits) -> Options {
    let mut budget = Budget::default();
    budget.max_documents = limits.documents;
    budget.max_nodes = limits.nodes;
    budget.max_events = limits.events;
    budget.max_total_scalar_bytes = limits.scalar_bytes;
    let mut options = Options::default();
    options.budget = Some(budget);
    options
}

/// Every document of a YAML stream.
pub fn from_multiple(text: &str) -> Result<Vec<Value>, String> {
    from_multiple_within(text, &LIMITS)
}

fn from_multiple_within(text: &str, limits: &Limits) -> Result<Vec<Value>, String> {
    serde_saphyr::from_multiple_with_options(text, options(limits)).map_err(|e| explain(&e, limits))
}

/// One YAML document read by the caller's own deserializer code, as the parser streams
/// it: nothing of the document is kept but what `f` keeps (a huge `List` of Events is read
/// item by item). Errors as [`from_multiple`]'s.
pub fn with_document<'de, R, F>(text: &'de str, f: F) -> Result<R, String>
where
    F: for<'e> FnOnce(serde_saphyr::Deserializer<'de, 'e>) -> Result<R, Error>,
{
    serde_saphyr::with_deserializer_from_str_with_options(text, options(&LIMITS), f)
        .map_err(|e| explain(&e, &LIMITS))
}

/// One YAML document as `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_saphyr::from_str_with_options(text, options(&LIMITS)).map_err(|e| explain(&e, &LIMITS))
}

fn breach(e: &Error) -> Option<&BudgetBreach> {
    match e {
        Error::Budget { breach, .. } => Some(breach),
        Error::WithSnippet { error, .. } | Error::AliasError { error, .. } => breach(error),
        _ => None,
    }
}

/// The parser's error as a user should read it: what limit a file passed and what to do,
/// or "not valid YAML" and the parser's own text, without advice about its options.
fn explain(e: &Error, limits: &Limits) -> String {
    if let Some(breach) = breach(e) {
        let (limit, what) = match breach {
            BudgetBreach::Documents { .. } => (limits.documents, "YAML documents"),
            BudgetBreach::Nodes { .. } => (limits.nodes, "YAML nodes (mappings, lists and values)"),
            BudgetBreach::Events { .. } => (limits.events, "YAML parser events"),
            BudgetBreach::ScalarBytes { .. } => (limits.scalar_bytes, "bytes of YAML values"),
            other => {
                return format!(
                    "this file exceeds one of Kestrel's limits on YAML ({other:?}): anchors, \
                     aliases or nesting beyond what Kubernetes objects use; write the objects \
                     out plainly"
                )
            }
        };
        return format!(
            "this file exceeds Kestrel's limit of {limit} {what} per file; split it into \
             several files"
        );
    }
    let text = e
        .to_string()
        .replace(
            ", set DuplicateKeyPolicy in Options if acceptable",
            "; a key may appear once in a mapping: remove or rename one",
        )
        .replace(
            "duplicate mapping key, set DuplicateKeyPolicy in Options if acceptable",
            "duplicate mapping key; a key may appear once in a mapping: remove or rename one",
        );
    format!("not valid YAML: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Node as `kubectl get nodes -o yaml` prints one, with its images and conditions
    /// (a few hundred YAML nodes).
    fn node(i: usize) -> String {
        let mut images = String::new();
        for j in 0..40 {
            images.push_str(&format!(
                "    - names: [\"registry.example/img{j}@sha256:{i:064}\", \"registry.example/img{j}:v{j}\"]\n      sizeBytes: {}\n",
                1000 + j
            ));
        }
        format!(
            "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: node-{i}\n    labels: {{kubernetes.io/hostname: node-{i}, kubernetes.io/os: linux}}\n  status:\n    allocatable: {{cpu: \"64\", memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"8\"}}\n    conditions:\n    - {{type: Ready, status: \"True\"}}\n    images:\n{images}"
        )
    }

    #[test]
    fn a_dump_of_thousands_of_nodes_and_a_file_of_thousands_of_documents_read() {
        // The parser's defaults refuse both (250,000 nodes; 1,024 documents).
        let dump: String = "apiVersion: v1\nkind: List\nitems:\n".to_string()
            + &(0..1_500).map(node).collect::<String>();
        let docs = from_multiple(&dump).unwrap();
        assert_eq!(docs[0]["items"].as_array().unwrap().len(), 1_500);
        let many: String = (0..5_000)
            .map(|i| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\n---\n"))
            .collect();
        assert_eq!(from_multiple(&many).unwrap().len(), 5_000);
    }

    #[test]
    fn limits_and_duplicate_keys_are_said_in_kestrels_words() {
        let small = Limits {
            documents: 3,
            nodes: 1_000,
            ..LIMITS
        };
        let docs = "a: 1\n---\na: 2\n---\na: 3\n---\na: 4\n";
        let e = from_multiple_within(docs, &small).unwrap_err();
        assert!(
            e.contains("exceeds Kestrel's limit of 3 YAML documents per file")
                && e.contains("split it"),
            "{e}"
        );
        let big = "a: [".to_string() + &"1, ".repeat(2_000) + "1]";
        let e = from_multiple_within(&big, &small).unwrap_err();
        assert!(e.contains("limit of 1000 YAML nodes"), "{e}");
        let e = from_multiple("a: 1\na: 2\n").unwrap_err();
        assert!(
            e.contains("duplicate mapping key") && e.contains("remove or rename one"),
            "{e}"
        );
        assert!(
            !e.contains("DuplicateKeyPolicy") && !e.contains("Options"),
            "{e}"
        );
    }
}
