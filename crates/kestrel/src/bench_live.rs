//! `kestrel bench live`: bind throughput on a real API server. Starts the test control
//! plane (testenv/), creates fake 8-GPU nodes, then lets kube-scheduler and `kestrel serve`
//! bind the same number of pending one-GPU pods, one after the other, with the same client
//! limits; prints binds/s of each, the ratio, and Kestrel's peak RSS. With `--dra` the GPUs
//! are published through DRA and each pod claims one from a template; a plain client
//! doing the writes each pod needs, unthrottled, measures what the API server takes.
//!
//! The bench links the test control plane (`kestrel-testenv`), so it is built only with
//! the `bench-live` feature: `cargo run --release --features bench-live -- bench live`.
//! Without it the command's options are the same (and documented the same) and running it
//! says how to build it.

use anyhow::Result;
use clap::Args;

// Read only by the bench: without the feature clap fills them and nothing reads them.
#[cfg_attr(not(feature = "bench-live"), allow(dead_code))]
#[derive(Args)]
pub struct LiveArgs {
    /// Fake nodes, 8 GPUs each.
    #[arg(long, default_value_t = 1000)]
    nodes: u32,
    /// Pending one-GPU pods each scheduler binds.
    #[arg(long, default_value_t = 5000)]
    pods: u32,
    /// Client-side write limit given to both schedulers (Kestrel's `--qps`,
    /// kube-scheduler's `--kube-api-qps`); default: Kestrel's default.
    #[arg(long)]
    qps: Option<f64>,
    /// Burst above --qps for both; default: Kestrel's default.
    #[arg(long)]
    burst: Option<u32>,
    /// Run only this scheduler: `kestrel` or `kube-scheduler` (or, with --dra, `plain
    /// client`).
    #[arg(long)]
    only: Option<String>,
    /// Give 40% of the pods inter-pod rules, as `bench placement --realistic` does: half
    /// of them a required anti-affinity on the hostname among the 10 pods of their app,
    /// half a DoNotSchedule spread over 4 zones (maxSkew 1) among the 10 of their app and a
    /// preferred anti-affinity on the hostname.
    #[arg(long)]
    inter_pod: bool,
    /// GPUs published through DRA as NVIDIA's driver publishes them (one ResourceSlice per
    /// node, no `nvidia.com/gpu`; its DeviceClass with a CEL selector), each pod claiming one
    /// GPU of at least 40 GiB from a ResourceClaimTemplate; kube-controller-manager's
    /// resourceclaim-controller creates the claims before a scheduler starts. A third run,
    /// a plain client with no limit, writes what each pod needs (the claim's finalizer, its
    /// allocation, the binding) to measure what the API server takes.
    #[arg(long, conflicts_with = "inter_pod")]
    dra: bool,
    /// Kestrel serves its dashboard (`--dashboard-addr`) and this many clients keep it
    /// open as the page does: each follows /api/stream and reads the summary, the GPU map
    /// and the pending list after every update. 0: no dashboard.
    #[arg(long, value_name = "N", default_value_t = 0)]
    dashboard_clients: usize,
    /// Give up on a scheduler that has not bound every pod after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    #[arg(long)]
    json: bool,
}

#[cfg(feature = "bench-live")]
mod run;

#[cfg(feature = "bench-live")]
pub fn run_live(args: LiveArgs) -> Result<()> {
    run::run_live(args)
}

/// Without the `bench-live` feature: what to build instead.
#[cfg(not(feature = "bench-live"))]
pub fn run_live(args: LiveArgs) -> Result<()> {
    let _ = args;
    anyhow::bail!(
        "`kestrel bench live` starts the test control plane, which this binary does not \
         include: build it with the bench-live feature, e.g. `cargo run --release \
         --features bench-live -- bench live ...` (and run testenv/build.sh once)"
    )
}
