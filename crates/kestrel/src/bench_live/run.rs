//! The bench itself (the `bench-live` feature): the test control plane, the fake nodes,
//! the pods, each scheduler's run and the report.

use super::LiveArgs;
use crate::runtime::Flavour;
use anyhow::{bail, Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kestrel_live::index::DELETE_PROTECTION;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};

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
        if only != "kestrel" && only != "kube-scheduler" && only != PLAIN_CLIENT {
            bail!("--only {only:?}: write `kestrel`, `kube-scheduler` or `plain client`");
        }
        if only == PLAIN_CLIENT && !args.dra {
            bail!("--only {only:?} measures DRA writes: add --dra");
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
    crate::runtime::block_on(Flavour::MultiThread(2), bench(&cp, &args))?
}

async fn bench(cp: &kestrel_testenv::ControlPlane, args: &LiveArgs) -> Result<()> {
    let client = cp.client().await;
    let qps = args.qps.unwrap_or(crate::serve::DEFAULT_QPS);
    let burst = args.burst.unwrap_or(crate::serve::DEFAULT_BURST);
    let t = Instant::now();
    // DRA nodes publish their GPUs in ResourceSlices only.
    let plugin_gpus = if args.dra { 0 } else { 8 };
    let nodes = (0..args.nodes)
        .map(|i| {
            let zone = format!("z{}", i % 4);
            kestrel_testenv::gpu_node(
                &node_name(i),
                plugin_gpus,
                &[("topology.kubernetes.io/zone", zone.as_str())],
            )
        })
        .collect();
    kestrel_testenv::create_gpu_nodes(&client, nodes).await;
    if args.dra {
        publish_dra_gpus(&client, args.nodes).await?;
        // Claims for 5,000 pods at the controller's default 20 writes/s would take minutes.
        cp.start_controller_manager(
            &["resourceclaim-controller"],
            &["--kube-api-qps=5000", "--kube-api-burst=10000"],
        );
    }
    eprintln!(
        "{} nodes created in {:.1} s",
        args.nodes,
        t.elapsed().as_secs_f64()
    );
    let mut runs = Vec::new();
    let mut schedulers = vec!["kube-scheduler", "kestrel"];
    if args.dra {
        schedulers.push(PLAIN_CLIENT);
    }
    for scheduler in schedulers {
        if args.only.as_deref().is_some_and(|o| o != scheduler) {
            continue;
        }
        let ns = format!("bench-{}", scheduler.replace(' ', "-"));
        let scheduler_name = match scheduler {
            "kestrel" => "kestrel",
            "kube-scheduler" => "default-scheduler",
            // Nobody's: the bench binds them itself.
            _ => "bench-plain-client",
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await?;
        let t = Instant::now();
        if args.dra {
            create_template(&client, &ns).await?;
        }
        create_pods(
            &client,
            &ns,
            scheduler_name,
            args.pods,
            args.inter_pod,
            args.dra,
        )
        .await?;
        eprintln!(
            "{scheduler}: {} pods created in {:.1} s",
            args.pods,
            t.elapsed().as_secs_f64()
        );
        if args.dra {
            let t = Instant::now();
            wait_for_claims(&client, &ns, args.pods).await?;
            eprintln!(
                "{scheduler}: their claims created in {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
        let counter = tokio::spawn(count_binds(client.clone(), ns.clone(), args.pods as usize));
        let started = Instant::now();
        let mut kestrel = None;
        let mut plain = None;
        let mut dashboard = None;
        if scheduler == PLAIN_CLIENT {
            plain = Some(tokio::spawn(plain_client_binds(client.clone(), ns.clone())));
        } else if scheduler == "kestrel" {
            let exe = std::env::current_exe().context("finding the kestrel binary")?;
            let (q, b) = (format!("--qps={qps}"), format!("--burst={burst}"));
            let mut flags = vec!["--leader-elect=false".to_string(), q, b];
            if args.dashboard_clients > 0 {
                let addr = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .context("finding a free port for the dashboard")?;
                flags.push(format!("--dashboard-addr={addr}"));
                dashboard = Some(DashboardClients::open(addr, args.dashboard_clients));
            }
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            kestrel = Some(kestrel_testenv::Kestrel::start(
                &exe,
                &cp.kubeconfig,
                &cp.dir,
                "kestrel-bench",
                &flags,
            ));
        } else {
            cp.start_kube_scheduler(&[
                &format!("--kube-api-qps={qps}"),
                &format!("--kube-api-burst={burst}"),
            ]);
        }
        let outcome = tokio::time::timeout(Duration::from_secs(args.timeout), counter).await;
        let peak_rss_mib = kestrel.as_ref().and_then(|k| k.peak_rss_mib());
        if let Some(d) = dashboard {
            let (clients, updates, reads) = d.counts();
            eprintln!(
                "{scheduler}: dashboard open in {clients} clients while binding: {updates} updates heard, {reads} pages read (summary, map, pending)"
            );
        }
        if let Some(mut k) = kestrel {
            k.terminate(Duration::from_secs(20));
        } else if let Some(plain) = plain {
            plain.await??;
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
        if args.dra {
            let allocated = allocated_claims(&client, &ns).await?;
            if allocated != args.pods as usize {
                bail!(
                    "{scheduler}: {} pods bound but {allocated} claims allocated",
                    args.pods
                );
            }
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
        wait_empty(&pods).await?;
        if args.dra {
            // The controller deallocates the ended pods' claims (their GPUs are free for the
            // next run); the garbage collector, which does not run here, would delete them.
            let mut left = allocated_claims(&client, &ns).await?;
            for _ in 0..600 {
                if left == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                left = allocated_claims(&client, &ns).await?;
            }
            if left > 0 {
                bail!("{scheduler}: {left} claims still allocated 120 s after their pods ended");
            }
            let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
            claims
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await?;
            wait_empty(&claims).await?;
        }
    }
    if args.dra {
        cp.stop_controller_manager();
    }
    report(args, qps, burst, &runs);
    Ok(())
}

/// Clients that keep the dashboard open as a browser page does (threads with blocking
/// sockets: they end when the server goes away).
struct DashboardClients {
    clients: usize,
    updates: std::sync::Arc<std::sync::atomic::AtomicU64>,
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DashboardClients {
    fn open(addr: std::net::SocketAddr, clients: usize) -> Self {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let updates = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reads = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        for _ in 0..clients {
            let (updates, reads) = (updates.clone(), reads.clone());
            std::thread::spawn(move || {
                let get = |path: &str| -> Option<()> {
                    let mut s = std::net::TcpStream::connect(addr).ok()?;
                    write!(
                        s,
                        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
                    )
                    .ok()?;
                    s.read_to_end(&mut Vec::new()).ok()?;
                    Some(())
                };
                // The server starts with the scheduler: try for a while.
                let deadline = Instant::now() + Duration::from_secs(60);
                let stream = loop {
                    match std::net::TcpStream::connect(addr) {
                        Ok(s) => break s,
                        Err(_) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(100))
                        }
                        Err(_) => return,
                    }
                };
                let mut writer = &stream;
                if write!(writer, "GET /api/stream HTTP/1.1\r\nhost: {addr}\r\n\r\n").is_err() {
                    return;
                }
                for line in BufReader::new(&stream).lines().map_while(Result::ok) {
                    if !line.starts_with("data: ") {
                        continue;
                    }
                    updates.fetch_add(1, Ordering::Relaxed);
                    let read = ["/api/summary", "/api/map", "/api/pending"]
                        .iter()
                        .all(|p| get(p).is_some());
                    if read {
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        DashboardClients {
            clients,
            updates,
            reads,
        }
    }

    fn counts(&self) -> (usize, u64, u64) {
        use std::sync::atomic::Ordering;
        (
            self.clients,
            self.updates.load(Ordering::Relaxed),
            self.reads.load(Ordering::Relaxed),
        )
    }
}

/// The bench's own API calls, at most 32 in flight; the first error ends the run.
struct InFlight(tokio::task::JoinSet<Result<()>>);

impl InFlight {
    fn new() -> Self {
        InFlight(tokio::task::JoinSet::new())
    }

    /// Starts `call`, first waiting for room.
    async fn start(
        &mut self,
        call: impl std::future::Future<Output = Result<()>> + Send + 'static,
    ) -> Result<()> {
        while self.0.len() >= 32 {
            self.0.join_next().await.expect("a task")??;
        }
        self.0.spawn(call);
        Ok(())
    }

    /// Waits for every call started.
    async fn finish(mut self) -> Result<()> {
        while let Some(r) = self.0.join_next().await {
            r??;
        }
        Ok(())
    }
}

/// The run that binds with a plain client: no scheduling, no limit.
const PLAIN_CLIENT: &str = "plain client";

fn node_name(i: u32) -> String {
    format!("bench-{i:05}")
}

/// NVIDIA's DeviceClass (with the selector its chart installs) and each node's 8 GPUs in a
/// ResourceSlice as NVIDIA's driver writes them.
async fn publish_dra_gpus(client: &kube::Client, nodes: u32) -> Result<()> {
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": crate::bench::dra::DRA_CLASS}}]}});
    kestrel_testenv::apply_yaml(client, &class.to_string(), false)
        .await
        .map_err(anyhow::Error::msg)?;
    let api: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(client.clone());
    let mut calls = InFlight::new();
    for i in 0..nodes {
        let node = node_name(i);
        let slice = serde_json::from_value(kestrel_testenv::nodes::nvidia_gpu_slice(&node, 8))?;
        let api = api.clone();
        calls
            .start(async move {
                api.create(&PostParams::default(), &slice).await?;
                Ok(())
            })
            .await?;
    }
    calls.finish().await
}

/// The namespace's template `one-gpu`: one GPU of NVIDIA's class with at least 40 GiB.
async fn create_template(client: &kube::Client, ns: &str) -> Result<()> {
    let template = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression": crate::bench::dra::DRA_REQUEST}}]}}]}}}});
    kestrel_testenv::apply_yaml(client, &template.to_string(), false)
        .await
        .map_err(anyhow::Error::msg)
}

/// Waits until the namespace holds `count` claims (the controller made one per pod).
async fn wait_for_claims(client: &kube::Client, ns: &str, count: u32) -> Result<()> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    for _ in 0..1200 {
        let made = claims
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        if made >= count as usize {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the resourceclaim-controller did not create {count} claims in {ns} within 600 s")
}

async fn allocated_claims(client: &kube::Client, ns: &str) -> Result<usize> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    Ok(claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
        .count())
}

/// Binds the namespace's pods as a scheduler would, with no scheduling and no client
/// limit (32 pods at a time): per pod its claim's finalizer, the claim's allocation (the
/// pod's own GPU, pod `i` on node `i / 8`) with the pod reserved, and the binding.
async fn plain_client_binds(client: kube::Client, ns: String) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    let mut list = pods.list(&ListParams::default()).await?.items;
    list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut calls = InFlight::new();
    for (i, pod) in list.into_iter().enumerate() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let claim = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.resource_claim_name.clone())
            .with_context(|| format!("pod {ns}/{name} names no generated claim"))?;
        let node = node_name(i as u32 / 8);
        let device = format!("gpu-{}", i % 8);
        let (pods, claims) = (pods.clone(), claims.clone());
        calls
            .start(async move {
                let params = PatchParams::default();
                claims
                    .patch(
                        &claim,
                        &params,
                        &Patch::Merge(json!({"metadata": {"finalizers": [DELETE_PROTECTION]}})),
                    )
                    .await?;
                claims
                    .patch_status(
                        &claim,
                        &params,
                        &Patch::Merge(json!({"status": {
                        "allocation": {
                            "devices": {"results": [{"request": "gpu",
                                "driver": "gpu.nvidia.com", "pool": node, "device": device}]},
                            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                        "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}})),
                    )
                    .await?;
                let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
                let _: serde_json::Value = pods
                    .create_subresource("binding", &name, &PostParams::default(), &binding)
                    .await?;
                Ok(())
            })
            .await?;
    }
    calls.finish().await
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
    let of_ceiling = match (rate("kestrel"), rate(PLAIN_CLIENT)) {
        (Some(k), Some(c)) => Some(k / c),
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
                         "dra": args.dra, "qps": qps, "burst": burst,
                         "runs": runs, "kestrel_over_kube_scheduler": ratio,
                         "kestrel_over_plain_client": of_ceiling});
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return;
    }
    println!(
        "{} nodes x 8 GPUs{}, {} one-GPU pods{}, client limits qps {qps} burst {burst}",
        args.nodes,
        if args.dra { " (DRA)" } else { "" },
        args.pods,
        if args.inter_pod {
            " (40% with inter-pod rules)"
        } else if args.dra {
            " (one claim each from a template)"
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
    if let Some(share) = of_ceiling {
        println!(
            "kestrel / plain client (no limit, 3 writes a pod): {:.0}%",
            share * 100.0
        );
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
    dra: bool,
) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut calls = InFlight::new();
    for i in 0..count {
        let mut pod = json!({
            "metadata": {"name": format!("p{i:06}"), "namespace": ns},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "trainer:1", "resources": {
                        "requests": {"cpu": "100m", "memory": "256Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"}}}]},
        });
        if dra {
            pod["spec"]["resourceClaims"] =
                json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
            pod["spec"]["containers"][0]["resources"] = json!({
                "requests": {"cpu": "100m", "memory": "256Mi"}, "claims": [{"name": "gpu"}]});
        }
        if let Some((labels, rules)) = inter_pod.then(|| inter_pod_rules(i)).flatten() {
            pod["metadata"]["labels"] = labels;
            for (k, v) in rules.as_object().expect("an object") {
                pod["spec"][k] = v.clone();
            }
        }
        let pod: Pod = serde_json::from_value(pod)?;
        let api = api.clone();
        calls
            .start(async move {
                api.create(&PostParams::default(), &pod).await?;
                Ok(())
            })
            .await?;
    }
    calls.finish().await
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

async fn wait_empty<K>(objects: &Api<K>) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    for _ in 0..600 {
        if objects
            .list_metadata(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!(
        "the benchmark's {} were not deleted within 120 s",
        K::plural(&Default::default())
    )
}
