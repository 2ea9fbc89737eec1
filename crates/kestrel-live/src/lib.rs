//! Kestrel's live Kubernetes driver.
//!
//! Watches feed [`index::LiveIndex`] (which wraps the engine), scheduling cycles run on
//! change, the binder carries the decisions out through the API, and a Lease keeps one
//! replica in charge. Everything that talks to the API server takes a `kube::Client`, so
//! tests drive it against a mocked API server.

pub mod api;
pub mod dashboard;
pub mod deploy;
pub mod driver;
pub mod index;
pub mod leader;
pub mod limiter;
pub mod live_dashboard;
pub mod maintenance;
pub mod metrics;
pub mod mlflow;
pub mod namespace_policies;
pub mod training;
