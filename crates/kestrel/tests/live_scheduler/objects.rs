//! The rendered Helm chart, warning Events on fields Kestrel does not honour, and the
//! dashboard following the leader.

use super::*;

/// The chart as helm itself renders it (`build/helm.sh render`, which .ci/run exports as
/// `KESTREL_HELM_RENDERED`) is accepted by the real API server: server-side dry run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_helm_chart_applies_to_the_api_server() {
    let Some((env, _serial)) = env() else { return };
    let Some(path) = std::env::var_os("KESTREL_HELM_RENDERED") else {
        kestrel_testenv::skip_or_fail(
            "KESTREL_HELM_RENDERED is not set: run `build/helm.sh render` and export it as target/helm-rendered.yaml (.ci/run does)",
        );
        return;
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", std::path::Path::new(&path).display()));
    let client = env.client().await;
    kestrel_testenv::apply_yaml(&client, &text, true)
        .await
        .unwrap_or_else(|e| panic!("the rendered chart does not apply: {e}"));
}

/// The `FieldNotHonoured` Warning events about an object (kind and name) in `namespace`.
async fn field_warning_events(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Vec<K8sEvent> {
    Api::<K8sEvent>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("listing events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FieldNotHonoured"))
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .collect()
}

/// Fields of other projects' objects that Kestrel does not honour are Warning events on
/// those objects, once while the warning lasts: a Volcano Queue's field Kestrel does not
/// read (cluster-scoped: its event is in `default`), a LimitRange's bound out of Kestrel's
/// range (in the LimitRange's namespace). A changed queue with the same warning posts
/// nothing again; a new warning on it posts only itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_kestrel_does_not_honour_are_warning_events_on_their_objects() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, queue) = ("fieldwarn", "kestrel-fieldwarn", "fieldwarn-team");
    let queue_yaml = |spec: &str| {
        format!("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {queue}}}\nspec: {spec}\n")
    };
    let first = queue_yaml("{weight: 1, extendClusters: [{name: other}]}");
    apply_foreign_queues(&client, &first).await;
    create_namespace(&client, ns).await;
    // 100 exa-cores: beyond what Kestrel counts in, so it cannot use that bound.
    let limits = format!("apiVersion: v1\nkind: LimitRange\nmetadata: {{name: huge, namespace: {ns}}}\nspec:\n  limits:\n  - type: Container\n    max: {{cpu: 100E}}\n");
    kestrel_testenv::apply_yaml(&client, &limits, false)
        .await
        .unwrap();
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "Queue"),
        "queues",
    );
    let queues: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let queue_uid = queues.get(queue).await.unwrap().metadata.uid;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);

    let on_queue = eventually(Duration::from_secs(60), "the queue's event", || async {
        let events = field_warning_events(&client, "default", "Queue", queue).await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(on_queue.len(), 1, "{on_queue:?}");
    let event = &on_queue[0];
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(
        regarding.api_version.as_deref(),
        Some("scheduling.volcano.sh/v1beta1")
    );
    assert_eq!(regarding.uid, queue_uid);
    assert_eq!(regarding.namespace, None);
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.as_deref().unwrap_or_default();
    assert!(
        note.contains(&format!("Queue {queue}")) && note.contains("field spec.extendClusters"),
        "{note}"
    );

    let on_limits = eventually(
        Duration::from_secs(60),
        "the LimitRange's event",
        || async {
            let events = field_warning_events(&client, ns, "LimitRange", "huge").await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    assert_eq!(on_limits.len(), 1, "{on_limits:?}");
    let regarding = on_limits[0].regarding.as_ref().unwrap();
    assert_eq!(regarding.api_version.as_deref(), Some("v1"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns));
    assert!(regarding.uid.is_some());
    let note = on_limits[0].note.as_deref().unwrap_or_default();
    assert!(
        note.contains(&format!("LimitRange {ns}/huge"))
            && note.contains("field spec.limits[0].max[cpu]"),
        "{note}"
    );

    // Changed, the same warning: no second event. A new warning: its own event only.
    let changed = queue_yaml("{weight: 2, extendClusters: [{name: other}]}");
    kestrel_testenv::apply_yaml(&client, &changed, false)
        .await
        .unwrap();
    let more = queue_yaml("{weight: 2, extendClusters: [{name: other}], dequeueStrategy: fifo}");
    kestrel_testenv::apply_yaml(&client, &more, false)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the new warning's event",
        || async {
            let events = field_warning_events(&client, "default", "Queue", queue).await;
            (events.len() >= 2).then_some(())
        },
    )
    .await;
    // Long enough for a second event of the first warning to show, were there one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let notes: Vec<String> = field_warning_events(&client, "default", "Queue", queue)
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.contains("spec.dequeueStrategy"))
            .count(),
        1,
        "{notes:?}"
    );
    assert_eq!(
        kestrel.log_count("field spec.extendClusters"),
        1,
        "{}",
        kestrel.log_text()
    );
    drop(kestrel);
    let _ = queues
        .delete(queue, &kube::api::DeleteParams::default())
        .await;
    cleanup(&client, "fieldwarn-", &[ns]).await;
}

/// GET `path` from a dashboard at `addr`: the status and the JSON body; `None` while it
/// does not answer.
fn dashboard_get(addr: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).ok()?))
}

/// Two loopback addresses free now (both held while the second is found).
fn two_free_addrs() -> [String; 2] {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    [a, b].map(|l| l.local_addr().unwrap().to_string())
}

/// Versions `/api/stream` announces, as they come.
fn stream_versions(addr: String) -> std::sync::mpsc::Receiver<u64> {
    use std::io::{BufRead, BufReader, Write};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
            return;
        };
        let _ = write!(s, "GET /api/stream HTTP/1.1\r\nhost: {addr}\r\n\r\n");
        for line in BufReader::new(s).lines().map_while(Result::ok) {
            if let Some(v) = line.strip_prefix("data: ").and_then(|v| v.parse().ok()) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Busy cells per node of the map whose name starts with `prefix`, and the pods on them.
fn busy_cells(map: &serde_json::Value, prefix: &str) -> (u64, Vec<(String, String)>) {
    let pods = map["pods"].as_array().unwrap();
    let mut busy = 0;
    let mut placed = Vec::new();
    for node in map["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["nodes"].as_array().unwrap())
        .filter(|n| n["name"].as_str().unwrap().starts_with(prefix))
    {
        for cell in node["gpus"].as_array().unwrap() {
            busy += u64::from(cell["used"].as_u64().unwrap() >= 1000);
            for p in cell["pods"].as_array().unwrap() {
                let pod = pods[p[0].as_u64().unwrap() as usize]["pod"]
                    .as_str()
                    .unwrap();
                let entry = (pod.to_string(), node["name"].as_str().unwrap().to_string());
                if !placed.contains(&entry) {
                    placed.push(entry);
                }
            }
        }
    }
    placed.sort();
    (busy, placed)
}

/// Waits until the dashboard at `addr` maps `want` (busy cells and pods on the nodes named
/// `prefix`...); the panic shows what it mapped last.
async fn wait_for_map(
    addr: &str,
    prefix: &str,
    want: &(u64, Vec<(String, String)>),
    what: &str,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        if let Some((status, map)) = dashboard_get(addr, "/api/map") {
            if status == 200 && busy_cells(&map, prefix) == *want {
                return map;
            }
            last = Some((status, map));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not seen within 30 s; wanted {want:?}, the dashboard answered {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kestrel serve --dashboard-addr` on two replicas: the leader's dashboard follows its
/// binds (the map, the pending list with the waiting pod's reason, the events, the update
/// stream) and agrees with the API server; the standby answers 503 saying it is not the
/// leader, until the leader stops and it takes over with the same picture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_the_leaders_binds_and_a_standby_says_so() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("dash", "kestrel-dash", "dash-");
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let addrs = two_free_addrs();
    let mut replicas: Vec<Option<kestrel_testenv::Kestrel>> = (0..2)
        .map(|i| {
            Some(env.kestrel(
                &format!("kestrel-dash-{i}"),
                &["--scheduler-name", scheduler, "--dashboard-addr", &addrs[i]],
            ))
        })
        .collect();
    // The leader's dashboard shows both nodes; the other's says it stands by.
    let leader = kestrel_testenv::eventually(
        Duration::from_secs(60),
        "one dashboard answering as the leader, with both nodes",
        || async {
            let answers: Vec<_> = addrs.iter().map(|a| dashboard_get(a, "/api/map")).collect();
            let leads = |a: &Option<(u16, serde_json::Value)>| {
                a.as_ref()
                    .is_some_and(|(s, map)| *s == 200 && busy_cells(map, prefix).0 == 0)
                    && a.as_ref()
                        .is_some_and(|(_, map)| map["counts"]["gpus"].as_u64().unwrap_or(0) >= 16)
            };
            match (leads(&answers[0]), leads(&answers[1])) {
                (true, false) => Some(0),
                (false, true) => Some(1),
                _ => None,
            }
        },
    )
    .await;
    let standby = 1 - leader;
    let (status, body) =
        dashboard_get(&addrs[standby], "/api/summary").expect("the standby answers");
    assert_eq!(status, 503, "{body}");
    let why = body["error"].as_str().unwrap();
    assert!(
        why.contains("not the leader") && why.contains(&format!("kestrel-dash-{standby}")),
        "{why}"
    );
    let (_, summary) = dashboard_get(&addrs[leader], "/api/summary").unwrap();
    assert_eq!(summary["source"], "leader", "{summary}");
    // The pages in a browser: the standby's says so, the leader's stays open while pods bind.
    let mut page = match browser::find_chromium() {
        Some(chromium) => {
            let profile = env.cp.dir.join("dashboard-browser");
            let log = env.cp.dir.join("dashboard-chromium.log");
            let mut b = browser::Browser::launch(&chromium, &profile, &log);
            b.open(&format!("http://{}/", addrs[standby]));
            let text = b.wait_for(
                "the standby's page saying it is not the leader",
                "document.querySelector('#view .error')",
                "document.querySelector('#view').innerText",
            );
            assert!(text.as_str().unwrap().contains("not the leader"), "{text}");
            b.call(
                "Page.navigate",
                json!({ "url": format!("http://{}/", addrs[leader]) }),
            );
            let drawn = b.wait_for(
                "the leader's GPU map drawn",
                "window.kestrel && window.kestrel.ready && document.querySelector('#map')?.dataset.busy !== undefined",
                browser::DRAWN,
            );
            let (_, before) = dashboard_get(&addrs[leader], "/api/map").unwrap();
            assert_eq!(drawn["busy"], before["counts"]["busy"], "{drawn}");
            Some((b, drawn["busy"].as_u64().unwrap()))
        }
        None => {
            kestrel_invariants::shared::skip_or_fail(
                "the live dashboard's pages cannot be opened: no chromium on PATH \
                 (apt-get install chromium, or set KESTREL_CHROMIUM)",
            );
            None
        }
    };

    // A page open on the leader: it hears of every change over the stream.
    let versions = stream_versions(addrs[leader].clone());
    let first = versions
        .recv_timeout(Duration::from_secs(30))
        .expect("the stream's first version");
    // Three 3-GPU pods bind; then an 8-GPU pod cannot (9 GPUs in use leave no node whole).
    let pods: Vec<Pod> = (0..3)
        .map(|i| gpu_pod(ns, &format!("small-{i}"), scheduler, 3, &[], &[]))
        .collect();
    create_pods(&client, pods).await;
    let bound = wait_bound(&client, ns, 3, Duration::from_secs(60)).await;
    let mut on_server: Vec<(String, String)> = bound
        .iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            Some((format!("{ns}/{name}"), node_of(p)?.to_string()))
        })
        .collect();
    on_server.sort();
    assert_eq!(on_server.len(), 3, "{on_server:?}");
    // The dashboard follows: the same pods on the same nodes, 9 busy cells.
    let want = (9, on_server.clone());
    let map = wait_for_map(
        &addrs[leader],
        prefix,
        &want,
        "the leader's map showing the three binds",
    )
    .await;
    assert!(
        map["counts"]["busy"].as_u64().unwrap() >= 9,
        "{}",
        map["counts"]
    );
    // The open page followed the binds (over /api/stream) and draws what the API says.
    if let Some((b, before)) = page.as_mut() {
        let drawn = b.wait_for(
            "the open page showing the three binds",
            &format!(
                "!document.querySelector('#live').hidden && +document.querySelector('#map')?.dataset.busy === {}",
                *before + 9
            ),
            browser::DRAWN,
        );
        let (_, now) = dashboard_get(&addrs[leader], "/api/map").unwrap();
        for k in ["busy", "shared", "free", "fragmented"] {
            assert_eq!(
                drawn[k], now["counts"][k],
                "{k}: drawn {drawn}, /api/map {}",
                now["counts"]
            );
        }
        assert!(b.errors.is_empty(), "page errors: {:?}", b.errors);
    }
    drop(page);
    create_pods(&client, vec![gpu_pod(ns, "big", scheduler, 8, &[], &[])]).await;
    let later = versions
        .recv_timeout(Duration::from_secs(30))
        .expect("an update on the stream after the binds");
    assert!(later > first, "stream versions {first} then {later}");
    let pending = kestrel_testenv::eventually(
        Duration::from_secs(30),
        "dash/big in the dashboard's pending list",
        || async {
            let (_, list) = dashboard_get(&addrs[leader], &format!("/api/pending?namespace={ns}"))?;
            let rows = list["pending"].as_array()?.clone();
            (rows.len() == 1).then_some(rows)
        },
    )
    .await;
    assert_eq!(pending[0]["pod"], "dash/big", "{pending:?}");
    let reason = pending[0]["reason"].as_str().unwrap();
    assert!(reason.contains("nvidia.com/gpu"), "{reason}");
    let (status, pod) = dashboard_get(&addrs[leader], "/api/pod/dash/big").unwrap();
    assert_eq!(
        (status, pod["phase"].as_str()),
        (200, Some("Pending")),
        "{pod}"
    );
    let (_, events) = dashboard_get(&addrs[leader], "/api/events").unwrap();
    let mut binds: Vec<(String, String)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "bind")
        .map(|e| {
            (
                e["pod"].as_str().unwrap().to_string(),
                e["node"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(p, _)| p.starts_with("dash/"))
        .collect();
    binds.sort();
    assert_eq!(binds, on_server, "bind events");
    let (status, missing) = dashboard_get(&addrs[leader], "/api/pod/dash/ghost").unwrap();
    assert_eq!(status, 404, "{missing}");
    assert!(
        missing["error"].as_str().unwrap().contains("not found"),
        "{missing}"
    );

    // The leader stops (releasing the lease): the standby leads and shows the same.
    let mut old = replicas[leader].take().unwrap();
    assert!(
        old.terminate(Duration::from_secs(20)),
        "the leader did not exit 0 on SIGTERM"
    );
    wait_for_map(
        &addrs[standby],
        prefix,
        &want,
        "the former standby's map showing the three binds",
    )
    .await;
    drop(replicas);
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}
