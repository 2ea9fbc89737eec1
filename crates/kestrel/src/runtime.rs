//! The CLI's async runtime, built the same way for every command that talks to a cluster
//! or serves: all drivers on (I/O, time), an error that says the runtime did not start.

use anyhow::{Context, Result};
use std::future::Future;

/// The threads a command's runtime runs its tasks on.
#[derive(Debug, Clone, Copy)]
pub enum Flavour {
    /// The calling thread alone (`new_current_thread`).
    CurrentThread,
    /// This many worker threads (`new_multi_thread`).
    MultiThread(usize),
}

/// A runtime of `flavour`, for a caller that needs it beyond one `block_on`.
pub fn runtime(flavour: Flavour) -> Result<tokio::runtime::Runtime> {
    let mut builder = match flavour {
        Flavour::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Flavour::MultiThread(workers) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(workers);
            builder
        }
    };
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Runs `future` to completion on a runtime of `flavour`.
pub fn block_on<F: Future>(flavour: Flavour, future: F) -> Result<F::Output> {
    Ok(runtime(flavour)?.block_on(future))
}
