//! The `kestrel` binary as a user runs it: from the workspace root, its output captured.
//!
//! Cargo tells only the binary's own package where it is built (`CARGO_BIN_EXE_kestrel`),
//! so the path comes from the test: [`kestrel_cli!`](crate::kestrel_cli) gives a [`Cli`]
//! for it.

use std::path::Path;
use std::process::{Command, Output};

/// A built binary, run from the workspace root.
#[derive(Clone, Copy, Debug)]
pub struct Cli {
    bin: &'static str,
}

impl Cli {
    pub const fn new(bin: &'static str) -> Self {
        Cli { bin }
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        Path::new(self.bin)
    }

    /// A command for the binary, in the workspace root, to add arguments and pipes to.
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.bin);
        command.current_dir(crate::workspace_root());
        command
    }

    /// Runs the binary with `args` and waits for its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run kestrel")
    }
}

/// The `kestrel` binary of the crate under test (only the `kestrel` package's tests have it).
#[macro_export]
macro_rules! kestrel_cli {
    () => {
        $crate::cli::Cli::new(env!("CARGO_BIN_EXE_kestrel"))
    };
}

/// Standard output and standard error as text.
pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
