//! `kestrel sim --serve ADDR`: the dashboard over a finished simulated run, with a time
//! slider over its stops (see docs/tasks/dashboard.md).

use crate::runtime::Flavour;
use crate::Inputs;
use anyhow::{bail, Result};
use kestrel_live::dashboard::{serve, Source};
use kestrel_sim::dashboard::timeline::Timeline;
use kestrel_view::dashboard::ApiError;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The slider's stops: evenly spaced over the run.
const STOPS: usize = 60;
/// Wall-clock time one answer's predicted starts may take.
const PREDICT_BUDGET: Duration = Duration::from_secs(20);

/// The engine's state is not shared between threads (it caches in cells): answers are
/// taken one at a time.
struct SimSource(Mutex<Timeline<'static>>);

impl Source for SimSource {
    fn answer(&self, path: &str, query: Option<&str>) -> Result<String, ApiError> {
        let timeline = self.0.lock().map_err(|_| ApiError {
            status: 500,
            message: "an earlier answer panicked; restart the dashboard".into(),
        })?;
        timeline.answer(path, query)
    }
}

/// `ADDR` as given: `HOST:PORT`, or a bare port on loopback.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?} is not an address: write a port (8080, on loopback) or HOST:PORT (127.0.0.1:8080)")
    })
}

/// Records the run's stops and serves the dashboard until Ctrl-C.
pub fn serve_sim(inputs: Inputs, addr: SocketAddr) -> Result<()> {
    // The server lives until the process ends: the inputs it borrows live as long.
    let inputs: &'static Inputs = Box::leak(Box::new(inputs));
    let timeline = Timeline::record(
        &inputs.cluster,
        &inputs.workload,
        inputs.config.clone(),
        STOPS,
        Some(PREDICT_BUDGET),
    )?;
    let stops = timeline.times().len();
    crate::runtime::block_on(Flavour::MultiThread(2), async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                bail!("listening on {addr} for the dashboard: {e}; pick another port with --serve")
            }
        };
        let local = listener.local_addr()?;
        eprintln!(
            "dashboard: http://{local}/ ({stops} moments on the time slider); Ctrl-C stops it"
        );
        // A finished run does not change: the version stays.
        let (_publish, updates) = tokio::sync::watch::channel(0u64);
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.send_replace(true);
        });
        serve(
            listener,
            Arc::new(SimSource(Mutex::new(timeline))),
            updates,
            shutdown,
        )
        .await?;
        Ok(())
    })?
}
