//! Embeds the git commit for `kestrel --version` (`KESTREL_GIT_COMMIT`): the environment
//! variable of that name when set (a container build without `.git`), else
//! `git rev-parse --short HEAD`, else "unknown".

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KESTREL_GIT_COMMIT");
    let commit = match std::env::var("KESTREL_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            // Rebuild when HEAD moves: HEAD itself (a checkout) and the branch it names.
            if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
                let dir = Path::new(&dir);
                println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
                println!(
                    "cargo:rerun-if-changed={}",
                    dir.join("packed-refs").display()
                );
                if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    println!("cargo:rerun-if-changed={}", dir.join(branch).display());
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=KESTREL_GIT_COMMIT={commit}");
}
