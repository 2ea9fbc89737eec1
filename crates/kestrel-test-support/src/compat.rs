//! The outcome a compatibility case (`tests/compat/*.yaml`) states in its header, read the
//! same way by the simulator's run of the set and the real control plane's.

/// `# expect: key=value ...`, `# expect-warning: text`, `# expect-error: text`.
#[derive(Default, Debug)]
pub struct Expected {
    pub counts: Vec<(String, String)>,
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

impl Expected {
    /// A count the header states.
    pub fn count(&self, key: &str) -> Option<u64> {
        self.counts.iter().find(|(k, _)| k == key).map(|(_, v)| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not a count"))
        })
    }
}

pub fn expected(text: &str) -> Expected {
    let mut e = Expected::default();
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix("# expect: ") {
            for pair in rest.split_whitespace() {
                let (k, v) = pair.split_once('=').expect("key=value");
                e.counts.push((k.to_string(), v.to_string()));
            }
        } else if let Some(rest) = line.strip_prefix("# expect-warning: ") {
            e.warnings.push(rest.to_string());
        } else if let Some(rest) = line.strip_prefix("# expect-error: ") {
            e.errors.push(rest.to_string());
        }
    }
    e
}
