//! `kestrel bench live`: bind throughput on a real API server. Starts the test control
//! plane (testenv/), creates fake 8-GPU nodes, then lets kube-scheduler and `kestrel serve`
//! bind the same number of pending one-GPU pods, one after the other, with the same client
//! limits; prints binds/s of each, the ratio, and Kestrel's peak RSS.

use anyhow::{bail, Context, Result};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};

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
    /// Run only this scheduler: `kestrel` or `kube-scheduler`.
    #[arg(long)]
    only: Option<String>,
    /// Give 40% of the pods inter-pod rules, as `bench placement --realistic` does: half
    /// of them a required anti-affinity on the hostname among the 10 pods of their app,
    /// half a DoNotSchedule spread over 4 zones (maxSkew 1) among the 10 of their app and a
    /// preferred anti-affinity on the hostname.
    #[arg(long)]
    inter_pod: bool,
    /// Give up on a scheduler that has not bound every pod after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    #[arg(long)]
    json: bool,
}

struct Run {
    scheduler: &'static str,
    to_first_bind: Duration,
    binding: Duration,
    peak_rss_mib: Option<f64>,
}

impl Run {
    fn binds_per_second(&self, pods: u32) -> f64 {
        f64::from(pods) / self.binding.as_secs_f64().max(1e-3)
    }
}

pub fn run_live(args: LiveArgs) -> Result<()> {
    if let Some(only) = &args.only {
        if only != "kestrel" && only != "kube-scheduler" {
            bail!("--only {only:?}: write `kestrel` or `kube-scheduler`");
        }
    }
    if args.nodes == 0 || args.pods == 0 {
        bail!("--nodes and --pods must be at least 1");
    }
    let Some(cp) = kestrel_testenv::ControlPlane::start() else {
        bail!(
            "the test control plane is not built in {}: run testenv/build.sh (or set KESTREL_TESTENV_BIN)",
            kestrel_testenv::bin_dir().display()
        );
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(bench(&cp, &args))
}

async fn bench(cp: &kestrel_testenv::ControlPlane, args: &LiveArgs) -> Result<()> {
    let client = cp.client().await;
    let qps = args.qps.unwrap_or(crate::serve::DEFAULT_QPS);
    let burst = args.burst.unwrap_or(crate::serve::DEFAULT_BURST);
    let t = Instant::now();
    let nodes = (0..args.nodes)
        .map(|i| {
            let zone = format!("z{}", i % 4);
            kestrel_testenv::gpu_node(
                &format!("bench-{i:05}"),
                8,
                &[("topology.kubernetes.io/zone", zone.as_str())],
            )
        })
        .collect();
    kestrel_testenv::create_gpu_nodes(&client, nodes).await;
    eprintln!(
        "{} nodes created in {:.1} s",
        args.nodes,
        t.elapsed().as_secs_f64()
    );
    let mut runs = Vec::new();
    for scheduler in ["kube-scheduler", "kestrel"] {
        if args.only.as_deref().is_some_and(|o| o != scheduler) {
            continue;
        }
        let ns = format!("bench-{scheduler}");
        let scheduler_name = if scheduler == "kestrel" {
            "kestrel"
        } else {
            "default-scheduler"
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await?;
        let t = Instant::now();
        create_pods(&client, &ns, scheduler_name, args.pods, args.inter_pod).await?;
        eprintln!(
            "{scheduler}: {} pods created in {:.1} s",
            args.pods,
            t.elapsed().as_secs_f64()
        );
        let counter = tokio::spawn(count_binds(client.clone(), ns.clone(), args.pods as usize));
        let started = Instant::now();
        let mut kestrel = None;
        if scheduler == "kestrel" {
            let exe = std::env::current_exe().context("finding the kestrel binary")?;
            let (q, b) = (format!("--qps={qps}"), format!("--burst={burst}"));
            kestrel = Some(kestrel_testenv::Kestrel::start(
                &exe,
                &cp.kubeconfig,
                &cp.dir,
                "kestrel-bench",
                &["--leader-elect=false", &q, &b],
            ));
        } else {
            cp.start_kube_scheduler(&[
                &format!("--kube-api-qps={qps}"),
                &format!("--kube-api-burst={burst}"),
            ]);
        }
        let outcome = tokio::time::timeout(Duration::from_secs(args.timeout), counter).await;
        let peak_rss_mib = kestrel.as_ref().and_then(|k| k.peak_rss_mib());
        if let Some(mut k) = kestrel {
            k.terminate(Duration::from_secs(20));
        } else {
            cp.stop_kube_scheduler();
        }
        let (first, last) = match outcome {
            Ok(Ok(Ok(times))) => times,
            Ok(Ok(Err(e))) => bail!("{scheduler}: watching the binds failed: {e}"),
            Ok(Err(e)) => bail!("{scheduler}: {e}"),
            Err(_) => bail!(
                "{scheduler} did not bind all {} pods within {} s",
                args.pods,
                args.timeout
            ),
        };
        let run = Run {
            scheduler,
            to_first_bind: first - started,
            binding: last - first,
            peak_rss_mib,
        };
        eprintln!(
            "{scheduler}: first bind after {:.1} s, {} binds in {:.1} s: {:.0} binds/s",
            run.to_first_bind.as_secs_f64(),
            args.pods,
            run.binding.as_secs_f64(),
            run.binds_per_second(args.pods)
        );
        runs.push(run);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
        wait_empty(&pods).await?;
    }
    report(args, qps, burst, &runs);
    Ok(())
}

fn report(args: &LiveArgs, qps: f64, burst: u32, runs: &[Run]) {
    let rate = |name: &str| {
        runs.iter()
            .find(|r| r.scheduler == name)
            .map(|r| r.binds_per_second(args.pods))
    };
    let ratio = match (rate("kestrel"), rate("kube-scheduler")) {
        (Some(k), Some(d)) => Some(k / d),
        _ => None,
    };
    if args.json {
        let runs: Vec<_> = runs
            .iter()
            .map(|r| {
                json!({"scheduler": r.scheduler, "binds_per_second": r.binds_per_second(args.pods),
                       "seconds_to_first_bind": r.to_first_bind.as_secs_f64(),
                       "seconds_binding": r.binding.as_secs_f64(), "peak_rss_mib": r.peak_rss_mib})
            })
            .collect();
        let out = json!({"nodes": args.nodes, "pods": args.pods, "inter_pod": args.inter_pod,
                         "qps": qps, "burst": burst,
                         "runs": runs, "kestrel_over_kube_scheduler": ratio});
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return;
    }
    println!(
        "{} nodes x 8 GPUs, {} one-GPU pods{}, client limits qps {qps} burst {burst}",
        args.nodes,
        args.pods,
        if args.inter_pod {
            " (40% with inter-pod rules)"
        } else {
            ""
        }
    );
    println!(
        "{:<16} {:>10} {:>14} {:>12} {:>14}",
        "scheduler", "binds/s", "first bind (s)", "binding (s)", "peak RSS (MiB)"
    );
    for r in runs {
        println!(
            "{:<16} {:>10.0} {:>14.1} {:>12.1} {:>14}",
            r.scheduler,
            r.binds_per_second(args.pods),
            r.to_first_bind.as_secs_f64(),
            r.binding.as_secs_f64(),
            r.peak_rss_mib
                .map(|m| format!("{m:.0}"))
                .unwrap_or_else(|| "-".into())
        );
    }
    if let Some(ratio) = ratio {
        println!("kestrel / kube-scheduler: {ratio:.2}x");
    }
}

/// The inter-pod rules of pod `i` under `--inter-pod` (see [`LiveArgs::inter_pod`]), with
/// the label its rules select.
fn inter_pod_rules(i: u32) -> Option<(serde_json::Value, serde_json::Value)> {
    let app = |kind: &str| format!("{kind}-{}", i / 50);
    match i % 5 {
        0 => {
            let labels = json!({"app": app("apart")});
            let affinity = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}});
            Some((labels, json!({"affinity": affinity})))
        }
        1 => {
            let labels = json!({"app": app("spread")});
            Some((
                labels.clone(),
                json!({
                    "topologySpreadConstraints": [{"maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": labels}}],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": labels},
                                                           "topologyKey": "kubernetes.io/hostname"}}]}},
                }),
            ))
        }
        _ => None,
    }
}

async fn create_pods(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    count: u32,
    inter_pod: bool,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let mut pod = json!({
            "metadata": {"name": format!("p{i:06}"), "namespace": ns},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "trainer:1", "resources": {
                        "requests": {"cpu": "100m", "memory": "256Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"}}}]},
        });
        if let Some((labels, rules)) = inter_pod.then(|| inter_pod_rules(i)).flatten() {
            pod["metadata"]["labels"] = labels;
            for (k, v) in rules.as_object().expect("an object") {
                pod["spec"][k] = v.clone();
            }
        }
        let pod: Pod = serde_json::from_value(pod)?;
        let api = api.clone();
        tasks.spawn(async move { api.create(&PostParams::default(), &pod).await.map(|_| ()) });
        while tasks.len() >= 32 {
            tasks.join_next().await.expect("a task")??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(())
}

/// Watches the namespace's pods until `count` have a node: (first bind, last bind).
async fn count_binds(
    client: kube::Client,
    ns: String,
    count: usize,
) -> Result<(Instant, Instant), String> {
    let api: Api<Pod> = Api::namespaced(client, &ns);
    let mut bound = HashSet::new();
    let mut first = None;
    let mut stream =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = stream.next().await {
        let pods = match event.map_err(|e| e.to_string())? {
            Event::Apply(p) | Event::InitApply(p) => vec![p],
            _ => continue,
        };
        for pod in pods {
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
                && bound.insert(pod.metadata.name.unwrap_or_default())
            {
                let now = Instant::now();
                first.get_or_insert(now);
                if bound.len() == count {
                    return Ok((first.unwrap_or(now), now));
                }
            }
        }
    }
    Err("the watch ended".into())
}

async fn wait_empty(pods: &Api<Pod>) -> Result<()> {
    for _ in 0..600 {
        if pods
            .list(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("the benchmark's pods were not deleted within 120 s")
}
