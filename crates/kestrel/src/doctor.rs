//! `kestrel doctor`: diagnose a cluster from a snapshot (files) or its API server.
//!
//! The checks live in `kestrel_doctor` (pure); this reads the input (Nodes, Pods and
//! Events; the Events a page at a time, aggregated as they come), prints the report and
//! sets the exit code: 0 no finding of severity warning or above, 1 error (bad input, API
//! server unreachable, unknown signature), 2 findings of severity warning or critical.
//! `kestrel serve` runs the same live reading and checks every `--doctor-interval`.

use crate::runtime::Flavour;
use anyhow::{bail, Context, Result};
use clap::Args;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kestrel_doctor::{self as doctor, DoctorOptions, Snapshot};
use kestrel_objects::duration::parse_duration;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct DoctorArgs {
    /// Snapshot files: `kubectl get events,nodes,pods -A -o yaml` output, or YAML files of
    /// Node, Pod and Event objects; `-` reads standard input.
    #[arg(value_name = "SNAPSHOT")]
    snapshots: Vec<PathBuf>,
    /// Read Nodes, Pods and Events from the cluster's API server instead of files.
    #[arg(long)]
    live: bool,
    /// Kubeconfig for --live; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Print the findings as a JSON array of {id, severity, what, where, why, fix}, plus
    /// signature and incidents for findings from events and container states.
    #[arg(long)]
    json: bool,
    /// Print a PrometheusRule with one alert per check (over kube-state-metrics and
    /// DCGM-exporter metrics) and exit.
    #[arg(long)]
    prometheus_rules: bool,
    /// Report pods unschedulable for at least this long (pod-pending-long).
    #[arg(long, value_name = "DUR", default_value = "15m", value_parser = parse_duration)]
    pending_for: u64,
    /// Count only events last seen this long before the snapshot's time (or now, with
    /// --live); each signature's events are grouped into incidents either way.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    since: Option<u64>,
    /// Print a PrometheusRule for one failure signature (as --json prints it, e.g.
    /// image-pull-failed/ErrImagePull/auth, or a check id) and exit.
    #[arg(long, value_name = "SIGNATURE")]
    alert_for: Option<String>,
}

pub fn run(args: DoctorArgs) -> Result<()> {
    if let Some(signature) = &args.alert_for {
        if args.live || !args.snapshots.is_empty() || args.json || args.prometheus_rules {
            bail!("--alert-for prints one alerting rule only; leave out snapshots, --live, --json and --prometheus-rules");
        }
        match doctor::render_signature_rule(signature) {
            Ok(rule) => print!("{rule}"),
            Err(e) => bail!("{e}"),
        }
        return Ok(());
    }
    if args.prometheus_rules {
        if args.live || !args.snapshots.is_empty() || args.json {
            bail!("--prometheus-rules prints the alerting rules only; leave out snapshots, --live and --json");
        }
        print!("{}", doctor::render_prometheus_rule());
        return Ok(());
    }
    if args.kubeconfig.is_some() && !args.live {
        bail!("--kubeconfig is for --live; add --live, or pass snapshot files instead");
    }
    let (snapshot, now) = match (args.live, args.snapshots.is_empty()) {
        (true, true) => (live(args.kubeconfig)?, Some(Timestamp::now())),
        (true, false) => bail!("pass snapshot files or --live, not both"),
        (false, true) => bail!(
            "nothing to diagnose: pass snapshot files (kubectl get events,nodes,pods -A -o yaml > \
             cluster.yaml) or --live"
        ),
        // A snapshot is judged as of its newest timestamp.
        (false, false) => (read_files(&args.snapshots)?, None),
    };
    let options = DoctorOptions {
        now,
        pending_for_ms: args.pending_for,
        since_ms: args.since,
    };
    let diagnosis = doctor::diagnose(&snapshot, &options);
    for note in &diagnosis.notes {
        eprintln!("note: {note}");
    }
    if args.json {
        println!("{}", doctor::render_json(&diagnosis));
    } else {
        print!("{}", doctor::render_text(&diagnosis));
    }
    let code = diagnosis.exit_code();
    if code != 0 {
        std::io::stdout().flush().ok();
        std::process::exit(code);
    }
    Ok(())
}

fn read_files(paths: &[PathBuf]) -> Result<Snapshot> {
    let mut files = Vec::new();
    for path in paths {
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the snapshot from standard input")?;
            text
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("{}: cannot read the snapshot", path.display()))?
        };
        let name = if path.as_os_str() == "-" {
            PathBuf::from("<stdin>")
        } else {
            path.clone()
        };
        files.push((name, text));
    }
    Ok(doctor::read_snapshot(&files)?)
}

fn live(kubeconfig: Option<PathBuf>) -> Result<Snapshot> {
    crate::runtime::block_on(Flavour::MultiThread(1), live_async(kubeconfig))?
}

async fn live_async(kubeconfig: Option<PathBuf>) -> Result<Snapshot> {
    let config = crate::serve::cluster_config(kubeconfig).await?;
    let source = format!("the API server at {}", config.cluster_url);
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    live_snapshot(&client, source).await
}

/// Nodes, unfinished Pods, DaemonSets, node usage and every Event from the API server. Events come a page at a
/// time and are aggregated as they come, so 100,000 of them are never held at once.
/// `v1` Events include those posted through `events.k8s.io/v1` (the same objects).
pub(crate) async fn live_snapshot(client: &kube::Client, source: String) -> Result<Snapshot> {
    let nodes: Vec<Node> = list_all(Api::all(client.clone()), ListParams::default())
        .await
        .with_context(|| format!("listing Nodes from {source}"))?;
    if nodes.is_empty() {
        bail!("{source} lists no Nodes; is the kubeconfig for the right cluster?");
    }
    // Finished pods hold no resources and are not scheduled again.
    let unfinished = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    let pods: Vec<Pod> = list_all(Api::all(client.clone()), unfinished)
        .await
        .with_context(|| format!("listing Pods from {source}"))?;
    let mut snapshot = Snapshot {
        source,
        nodes,
        pods,
        ..Snapshot::default()
    };
    node_metrics(client, &mut snapshot).await;
    dra_objects(client, &mut snapshot).await?;
    // The GPU and Network Operators' DaemonSets: pods missing on nodes.
    let daemonsets: Vec<DaemonSet> = list_all(Api::all(client.clone()), ListParams::default())
        .await
        .with_context(|| format!("listing DaemonSets from {}", snapshot.source))?;
    for ds in &daemonsets {
        if let Some(counts) = serde_json::to_value(ds)
            .ok()
            .and_then(|v| doctor::DaemonSetCounts::from_value(&v))
        {
            snapshot.daemonsets.push(counts);
        }
    }
    let events: Api<Event> = Api::all(client.clone());
    let mut params = ListParams::default().limit(500);
    loop {
        let page = events
            .list(&params)
            .await
            .with_context(|| format!("listing Events from {}", snapshot.source))?;
        for event in &page.items {
            let value = serde_json::to_value(event).context("encoding an Event")?;
            if let Err((field, message)) = snapshot.events.add(&value) {
                let meta = &event.metadata;
                snapshot.notes.push(format!(
                    "left out Event {}/{}: {field}: {message}",
                    meta.namespace.as_deref().unwrap_or(""),
                    meta.name.as_deref().unwrap_or("")
                ));
            }
        }
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(snapshot)
}

/// ResourceSlices and ResourceClaims (`resource.k8s.io/v1`), for the DRA checks; where
/// DRA is not served, or not to this user, a note says so and they are not checked.
async fn dra_objects(client: &kube::Client, snapshot: &mut Snapshot) -> Result<()> {
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
    let slices = list_all(
        Api::<ResourceSlice>::all(client.clone()),
        ListParams::default(),
    )
    .await;
    let claims = list_all(
        Api::<ResourceClaim>::all(client.clone()),
        ListParams::default(),
    )
    .await;
    match (slices, claims) {
        (Ok(slices), Ok(claims)) => {
            snapshot.slices = slices;
            snapshot.claims = claims;
        }
        (Err(e), _) | (_, Err(e)) => {
            let code = e.downcast_ref::<kube::Error>().and_then(|e| match e {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            });
            match code {
                Some(404) => snapshot
                    .notes
                    .push("resource.k8s.io/v1 is not served: DRA is not checked".to_string()),
                Some(403) => snapshot.notes.push(
                    "listing ResourceSlices or ResourceClaims is refused to this user: DRA is \
                     not checked; grant list on resourceslices and resourceclaims \
                     (resource.k8s.io)"
                        .to_string(),
                ),
                _ => {
                    return Err(e)
                        .with_context(|| format!("listing DRA objects from {}", snapshot.source))
                }
            }
        }
    }
    Ok(())
}

/// The nodes' real use from the metrics API (what `kubectl top nodes` reads). Where it is
/// not served (no metrics-server) a note says so and the usage check is skipped.
async fn node_metrics(client: &kube::Client, snapshot: &mut Snapshot) {
    let resource = ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "NodeMetrics".into(),
        plural: "nodes".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            for item in &list.items {
                let value = serde_json::to_value(item).unwrap_or_default();
                if let Err((field, message)) = snapshot.add_node_metrics(&value) {
                    snapshot.notes.push(format!(
                        "left out NodeMetrics {}: {field}: {message}",
                        item.metadata.name.as_deref().unwrap_or("")
                    ));
                }
            }
        }
        Err(kube::Error::Api(s)) if s.code == 403 => snapshot.notes.push(
            "the metrics API (metrics.k8s.io) refuses to list node usage to this user: node \
             usage is not checked; grant list on nodes.metrics.k8s.io"
                .to_string(),
        ),
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 503) => {
            snapshot.notes.push(format!(
                "the metrics API (metrics.k8s.io, what kubectl top reads) is not served here \
                 (HTTP {}): node usage is not checked; install metrics-server to check it",
                s.code
            ));
        }
        Err(e) => snapshot.notes.push(format!(
            "the metrics API (metrics.k8s.io) did not answer: {e}; node usage is not checked"
        )),
    }
}

/// Every object, a page of 500 at a time.
async fn list_all<K>(api: Api<K>, params: ListParams) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned,
{
    let mut params = params.limit(500);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
