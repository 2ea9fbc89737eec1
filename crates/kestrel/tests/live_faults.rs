//! `kestrel serve` through faults on a real control plane (testenv/): the leader killed,
//! kube-apiserver killed and restarted (watches then expire: 410 Gone), etcd compacted,
//! the API server frozen for 10 s, connections cut mid-request (answers lost), the leader
//! paused past its lease and resumed, SIGTERM.
//! After each: every pod bound, no GPU given twice, no node over its allocatable, nothing
//! stranded (the invariant checker on what the API server holds), and the log tells what
//! happened once.

// The serial lock is held for a whole test on purpose: tests share one control plane
// and run one at a time, each on its own runtime, so no task waits on another's guard.
#![allow(clippy::await_holding_lock)]

mod live;

use kestrel_testenv::{CuttableLink, FakeKubelet, Kestrel};
use live::*;
use std::time::{Duration, Instant};

/// The test's namespace, `nodes` 8-GPU nodes in its pool and a fake kubelet running them.
async fn pool_with_kubelet(client: &kube::Client, ns: &str, nodes: usize) -> FakeKubelet {
    create_namespace(client, ns).await;
    create_pool_nodes(client, ns, 0, nodes).await;
    FakeKubelet::start(client.clone(), &format!("{ns}-"))
}

/// Two replicas of `scheduler`: `a` leads before `b` starts.
async fn two_replicas(env: &Env, scheduler: &str) -> (Kestrel, Kestrel) {
    let args = ["--scheduler-name", scheduler];
    let first = env.kestrel(&format!("{scheduler}-a"), &args);
    eventually(Duration::from_secs(30), "replica a leading", || async {
        (first.log_count("leading: rebuilding state") == 1).then_some(())
    })
    .await;
    let second = env.kestrel(&format!("{scheduler}-b"), &args);
    (first, second)
}

/// Waits for `standby` to lead after the leader stopped renewing at `since`, and asserts
/// it did within the lease duration (15 s) + 5 s.
async fn standby_takes_over(standby: &Kestrel, since: Instant) {
    let taken = eventually(Duration::from_secs(30), "replica b leading", || async {
        (standby.log_count("leading: rebuilding state") == 1).then(|| since.elapsed())
    })
    .await;
    assert!(
        taken <= Duration::from_secs(20),
        "takeover took {taken:?} (lease 15 s + 5 s)"
    );
}

/// `count` one-GPU pods of `scheduler`, each running `runtime` once started.
async fn one_gpu_pods(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    count: usize,
    runtime: &str,
) {
    let pods = (0..count)
        .map(|i| {
            gpu_pod(
                ns,
                &format!("p{i:04}"),
                scheduler,
                1,
                &[],
                &[("kestrel.dev/sim-duration", runtime)],
            )
        })
        .collect();
    create_pods(client, pods).await;
}

async fn bound_count(client: &kube::Client, ns: &str) -> usize {
    pods_in(client, ns)
        .await
        .iter()
        .filter(|p| node_of(p).is_some())
        .count()
}

/// Runs the checker every `every` until `done` pods of `ns` have succeeded.
async fn check_until_done(client: &kube::Client, ns: &str, done: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        assert_invariants(client).await;
        let pods = pods_in(client, ns).await;
        let succeeded = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
            .count();
        if succeeded >= done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {succeeded} of {done} pods done after {timeout:?}; {} bound",
            pods.iter().filter(|p| node_of(p).is_some()).count()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// kube-apiserver SIGKILLed mid-run and restarted with etcd compacted meanwhile: the
/// watches resume with "too old resource version" (410), the scheduler relists, never
/// gives a GPU twice, and binds again within 10 s of the API server answering (and a GPU
/// being free: pods run 8 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restart_with_compaction_never_overcommits() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("restart", "kestrel-restart", "restart-");
    let _kubelet = pool_with_kubelet(&client, ns, 20).await;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    // 320 pods of 8 s on 160 GPUs: two rounds, the restart in the first.
    one_gpu_pods(&client, ns, scheduler, 320, "8s").await;
    eventually(Duration::from_secs(60), "first binds", || async {
        (bound_count(&client, ns).await >= 40).then_some(())
    })
    .await;
    env.cp.kill_apiserver();
    env.cp.compact();
    let down = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.cp.start_apiserver();
    let answering = Instant::now();
    eprintln!("API server down {:?}", answering - down);
    let client = env.client().await;
    let before = bound_count(&client, ns).await;
    // Every GPU may be held when the API server answers: the next bind waits for a pod
    // to end too (they run 8 s), so the window is 10 s past that.
    eventually(
        Duration::from_secs(18),
        "a bind within 10 s of the API server answering and a GPU being free",
        || async { (bound_count(&client, ns).await > before || before == 320).then_some(()) },
    )
    .await;
    check_until_done(&client, ns, 320, Duration::from_secs(150)).await;
    let log = kestrel.log_text();
    assert_eq!(kestrel.log_count("lease lost"), 0, "{log}");
    assert!(kestrel.ready(), "not ready after the restart:\n{log}");
    // The log goes to a file, as a pod's does: plain text, no terminal colour codes.
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );
    cleanup(&client, prefix, &[ns]).await;
}

/// Every connection to the API server cut, again and again, while pods are bound: some
/// bindings are written with their answers lost. The scheduler must count each such pod
/// where the API holds it (never free its GPUs on a lost answer), so no GPU is given twice
/// and every pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_bind_never_overcommit() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("cut", "kestrel-cut", "cut-");
    let _kubelet = pool_with_kubelet(&client, ns, 10).await;
    let link = CuttableLink::start(&env.cp.server).await;
    let kestrel = env.kestrel_through(link.server(), scheduler, &["--scheduler-name", scheduler]);
    eventually(Duration::from_secs(30), "leading", || async {
        (kestrel.log_count("leading: rebuilding state") == 1).then_some(())
    })
    .await;
    // 400 pods of 3 s on 80 GPUs: five rounds, each bound while connections are cut.
    one_gpu_pods(&client, ns, scheduler, 400, "3s").await;
    let cutting = tokio::spawn(async move {
        let mut delay = 0u64;
        for _ in 0..40 {
            // Uneven gaps, so the cuts meet binds at every stage.
            delay = (delay * 7 + 3) % 11;
            tokio::time::sleep(Duration::from_millis(150 + 60 * delay)).await;
            link.cut();
        }
        link
    });
    check_until_done(&client, ns, 400, Duration::from_secs(150)).await;
    let _link = cutting.await.expect("the cutting task");
    let log = kestrel.log_text();
    let read_back = kestrel.log_count("the pod reads back bound");
    eprintln!(
        "binds read back after a lost answer: {read_back} bound, {} failed",
        kestrel.log_count("bind failed; requeued")
    );
    // The cuts met bindings in flight (34 of 400 in a measured run), or this proved nothing.
    assert!(read_back > 0, "no binding's answer was lost:\n{log}");
    assert_eq!(kestrel.log_count("lease lost"), 0, "{log}");
    cleanup(&client, prefix, &[ns]).await;
}

/// The API server frozen (SIGSTOP) for 10 s: nothing answers, connections hang. The
/// leader loses its lease (10 s renew deadline) or keeps it; either way nothing is
/// over-committed and every pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_unreachable_for_ten_seconds() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("frozen", "kestrel-frozen", "frozen-");
    let _kubelet = pool_with_kubelet(&client, ns, 10).await;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    one_gpu_pods(&client, ns, scheduler, 160, "6s").await;
    eventually(Duration::from_secs(60), "first binds", || async {
        (bound_count(&client, ns).await >= 20).then_some(())
    })
    .await;
    env.cp.pause_apiserver();
    tokio::time::sleep(Duration::from_secs(10)).await;
    env.cp.resume_apiserver();
    let client = env.client().await;
    check_until_done(&client, ns, 160, Duration::from_secs(120)).await;
    assert!(
        kestrel.ready(),
        "not ready after the freeze:\n{}",
        kestrel.log_text()
    );
    cleanup(&client, prefix, &[ns]).await;
}

/// Two replicas; the leader SIGKILLed mid-run. The standby takes over within the lease
/// duration (15 s) + 5 s, and no GPU is given twice across the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_standby_takes_over() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("failover", "kestrel-failover", "failover-");
    let _kubelet = pool_with_kubelet(&client, ns, 10).await;
    let (mut first, second) = two_replicas(env, scheduler).await;
    one_gpu_pods(&client, ns, scheduler, 200, "6s").await;
    eventually(Duration::from_secs(60), "first binds", || async {
        (bound_count(&client, ns).await >= 30).then_some(())
    })
    .await;
    first.kill();
    standby_takes_over(&second, Instant::now()).await;
    check_until_done(&client, ns, 200, Duration::from_secs(120)).await;
    assert!(
        !second.log_text().contains("lease lost"),
        "{}",
        second.log_text()
    );
    cleanup(&client, prefix, &[ns]).await;
}

/// Two replicas; the leader paused (SIGSTOP) past its lease while pods bind, and resumed
/// after the standby took over. The standby leads within the lease duration + 5 s; the
/// resumed replica writes nothing on its stale state (its leadership lapsed by its own
/// clock), steps down once and stays a standby; no GPU is given twice at any time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_paused_past_its_lease_steps_down_without_writing() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("paused", "kestrel-paused", "paused-");
    let _kubelet = pool_with_kubelet(&client, ns, 10).await;
    let (first, second) = two_replicas(env, scheduler).await;
    one_gpu_pods(&client, ns, scheduler, 240, "6s").await;
    eventually(Duration::from_secs(60), "first binds", || async {
        (bound_count(&client, ns).await >= 30).then_some(())
    })
    .await;
    first.pause();
    standby_takes_over(&second, Instant::now()).await;
    // b binds a while on its own state, then a wakes with its pipeline as it was.
    eventually(Duration::from_secs(30), "replica b binding", || async {
        assert_invariants(&client).await;
        (bound_count(&client, ns).await >= 100).then_some(())
    })
    .await;
    first.resume();
    let resumed = Instant::now();
    eventually(
        Duration::from_secs(10),
        "replica a stepping down",
        || async {
            assert_invariants(&client).await;
            (first.log_count("lease lost") == 1).then_some(())
        },
    )
    .await;
    eprintln!(
        "replica a stepped down {:?} after resuming",
        resumed.elapsed()
    );
    check_until_done(&client, ns, 240, Duration::from_secs(150)).await;
    let log = first.log_text();
    assert_eq!(first.log_count("lease lost"), 1, "{log}");
    assert_eq!(first.log_count("leading: rebuilding state"), 1, "{log}");
    assert!(
        !second.log_text().contains("lease lost"),
        "{}",
        second.log_text()
    );
    cleanup(&client, prefix, &[ns]).await;
}

/// SIGTERM: the leader stops binding, releases its lease (the standby leads at once),
/// exits 0, and says so once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_over_at_once() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("sigterm", "kestrel-sigterm", "sigterm-");
    let _kubelet = pool_with_kubelet(&client, ns, 4).await;
    let (mut first, second) = two_replicas(env, scheduler).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = Instant::now();
    assert!(
        first.terminate(Duration::from_secs(20)),
        "replica a did not exit 0:\n{}",
        first.log_text()
    );
    let taken = eventually(Duration::from_secs(20), "replica b leading", || async {
        (second.log_count("leading: rebuilding state") == 1).then(|| asked.elapsed())
    })
    .await;
    assert!(
        taken <= Duration::from_secs(5),
        "the lease was not released: takeover took {taken:?}"
    );
    let log = first.log_text();
    assert_eq!(first.log_count("shutting down"), 1, "{log}");
    assert_eq!(first.log_count("lease lost"), 0, "{log}");
    one_gpu_pods(&client, ns, scheduler, 40, "3s").await;
    check_until_done(&client, ns, 40, Duration::from_secs(90)).await;
    cleanup(&client, prefix, &[ns]).await;
}
