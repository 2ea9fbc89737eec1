//! Failures injected into a simulated TrainingJob: the `kestrel.dev/sim-failures`
//! annotation.

use crate::workload::InjectedFailure;
use kestrel_objects::duration::parse_duration;
use kestrel_objects::training::Plan;

/// Members of a TrainingJob that fail in the simulation: a comma-separated list of
/// `<member>@<run time>:exit=<code>`, e.g. `"worker-1@20m:exit=137, master-0@1h:exit=1"`.
pub const FAILURES_ANNOTATION: &str = "kestrel.dev/sim-failures";

const FORM: &str = "write <member>@<run time>:exit=<code>, comma-separated, e.g. \
                    \"worker-1@20m:exit=137, master-0@1h:exit=1\"";

/// Reads the annotation against the job's members; the error says what is wrong and the
/// form to write.
pub fn parse_failures(plan: &Plan, text: &str) -> Result<Vec<InjectedFailure>, String> {
    let members: Vec<String> = plan
        .members()
        .iter()
        .map(|(role, i)| format!("{}-{i}", role.to_ascii_lowercase()))
        .collect();
    let mut out = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = |why: String| format!("{entry:?}: {why}; {FORM}");
        let (member, rest) = entry
            .split_once('@')
            .ok_or_else(|| bad("no @<run time>".into()))?;
        let (time, exit) = rest
            .split_once(':')
            .ok_or_else(|| bad("no :exit=<code>".into()))?;
        let code = exit
            .trim()
            .strip_prefix("exit=")
            .ok_or_else(|| bad(format!("{exit:?} is not exit=<code>")))?;
        let exit: i32 = code
            .trim()
            .parse()
            .ok()
            .filter(|c| (1..=255).contains(c))
            .ok_or_else(|| bad(format!("exit code {code:?} is not from 1 to 255")))?;
        let after = parse_duration(time).map_err(|e| format!("{entry:?}: {e}"))?;
        let member = member.trim();
        let (role, index) = member
            .rsplit_once('-')
            .and_then(|(r, i)| Some((r, i.parse::<u32>().ok()?)))
            .filter(|_| members.iter().any(|m| m == member))
            .ok_or_else(|| {
                bad(format!(
                    "the job has no member {member:?}; its members are {}",
                    members.join(", ")
                ))
            })?;
        let role = plan
            .roles
            .iter()
            .find(|r| r.name.eq_ignore_ascii_case(role))
            .map(|r| r.name.clone())
            .expect("a member's role is the plan's");
        out.push(InjectedFailure {
            role,
            index,
            after,
            exit,
        });
    }
    if out.is_empty() {
        return Err(format!("{text:?} names no failure; {FORM}, or remove it"));
    }
    Ok(out)
}
