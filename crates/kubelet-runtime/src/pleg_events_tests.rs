//! The PLEG woken by the runtime's container events (the fake with [`FakeRuntime::enable_events`]), on tokio's
//! paused clock: what triggers relists, the fallback to the periodic relist when the stream breaks, and the
//! periodic relist of runtimes without events.

use super::tests::{on_fake, running_pod};
use super::*;
use kubelet_cri::FakeRuntime;

/// Runs the PLEG on its own task until the token is cancelled.
fn spawn(pleg: GenericPleg) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    (cancel.clone(), tokio::spawn(pleg.run(cancel)))
}

/// Relists since the calls were last cleared: each relist lists all containers once, each inspection of a pod
/// (one sandbox in these tests) lists its containers once and asks its sandbox's status once.
fn relists(fake: &FakeRuntime) -> usize {
    fake.count("ListContainers") - fake.count("PodSandboxStatus")
}

fn died(uid: &str, id: &str) -> PodLifecycleEvent {
    PodLifecycleEvent { id: PodUid::from(uid), kind: PodLifecycleEventType::ContainerDied, data: id.to_string() }
}

/// `ListContainers` calls over 10 minutes of a node with 3 running pods and no change (known to the PLEG
/// already), and `GetContainerEvents` calls.
async fn quiet_node(events: bool) -> (usize, usize) {
    let (fake, _cache, _rx, health, mut pleg) = on_fake(1000);
    if events {
        fake.enable_events();
    }
    for uid in ["a", "b", "c"] {
        running_pod(&fake, uid).await;
    }
    pleg.relist().await.unwrap();
    fake.clear_calls();
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(health.healthy().is_ok());
    let lists = fake.count("ListContainers");
    cancel.cancel();
    task.await.unwrap();
    (lists, fake.count("GetContainerEvents"))
}

#[tokio::test(start_paused = true)]
async fn with_events_a_quiet_node_is_listed_only_by_the_safety_relists() {
    let (lists, opens) = quiet_node(true).await;
    assert!((10..=11).contains(&lists), "start and a safety relist every 60 s: {lists}");
    assert_eq!(opens, 1);
    let (lists, opens) = quiet_node(false).await;
    assert!((600..=601).contains(&lists), "every second without events: {lists}");
    assert_eq!(opens, 1, "asked once");
}

#[tokio::test(start_paused = true)]
async fn with_events_a_container_exit_is_reported_at_once() {
    let (fake, _cache, mut rx, health, pleg) = on_fake(1000);
    fake.enable_events();
    let mut pods = vec![];
    for uid in ["a", "b", "c"] {
        pods.push(running_pod(&fake, uid).await);
    }
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(health.threshold(), EVENTED_RELIST_THRESHOLD);
    while rx.try_recv().is_ok() {}

    let start = Instant::now();
    fake.exit_container(&pods[1].1, 1);
    let ev = tokio::time::timeout(Duration::from_millis(10), rx.recv()).await.expect("reported within 10 ms");
    assert_eq!(ev.unwrap(), died("b", &pods[1].1));
    assert!(start.elapsed() <= Duration::from_millis(10), "{:?}", start.elapsed());
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn events_ready_together_make_one_relist_and_event_relists_keep_their_gap() {
    let (fake, _cache, mut rx, _health, pleg) = on_fake(1000);
    fake.enable_events();
    let mut pods = vec![];
    for uid in ["a", "b", "c", "d"] {
        pods.push(running_pod(&fake, uid).await);
    }
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_secs(5)).await;
    while rx.try_recv().is_ok() {}
    fake.clear_calls();

    for (_, c) in &pods[..3] {
        fake.exit_container(c, 1);
    }
    let start = Instant::now();
    let mut got = vec![];
    for _ in 0..3 {
        got.push(rx.recv().await.unwrap().id.0);
    }
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(relists(&fake), 1, "one relist for the burst");

    // Another change right after: relisted once the gap since the last relist has passed.
    tokio::time::sleep(Duration::from_millis(10)).await;
    fake.exit_container(&pods[3].1, 1);
    assert_eq!(rx.recv().await.unwrap(), died("d", &pods[3].1));
    assert_eq!(start.elapsed(), EVENT_RELIST_MIN_GAP);
    assert_eq!(relists(&fake), 2);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_falls_back_to_relisting_every_second_until_it_is_back() {
    let (fake, _cache, mut rx, health, pleg) = on_fake(1000);
    fake.enable_events();
    let (_, a) = running_pod(&fake, "a").await;
    let (_, b) = running_pod(&fake, "b").await;
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_secs(5)).await;
    while rx.try_recv().is_ok() {}
    assert_eq!(fake.count("GetContainerEvents"), 1);

    // The stream breaks at 5 s and the first reopen (at 6 s) fails: the stream is down until 8 s.
    fake.inject_error(
        "GetContainerEvents",
        kubelet_cri::CriError::Unavailable { op: "GetContainerEvents", message: "connection refused".into() },
    );
    fake.break_event_streams();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(health.threshold(), RELIST_THRESHOLD);
    assert!(health.healthy().is_ok());
    fake.clear_calls();

    // A container exits while the stream is down: the relist a second after the break reports it.
    let start = Instant::now();
    fake.exit_container(&a, 2);
    let ev = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await.expect("reported by the 1 s relist");
    assert_eq!(ev.unwrap(), died("a", &a));
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    tokio::time::sleep(Duration::from_millis(1900)).await;
    assert_eq!(fake.count("GetContainerEvents"), 1, "the failed reopen at 6 s");
    assert_eq!(relists(&fake), 2, "at 6 s and 7 s");

    // Reopened at 8 s (1 s then 2 s of back-off): relisted at once, then back to events.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(fake.count("GetContainerEvents"), 2, "reconnected");
    assert_eq!(health.threshold(), EVENTED_RELIST_THRESHOLD);
    let n = relists(&fake);
    assert!((3..=4).contains(&n), "the relist due at 8 s and the one after reopening: {n}");
    // The runtime came back: the relist stays periodic for a while (a change made while it came back may never
    // be announced), then only events and the safety relist.
    fake.clear_calls();
    tokio::time::sleep(RECONNECT_SETTLE).await;
    let settling = relists(&fake);
    assert!((58..=61).contains(&settling), "every second after the reconnect: {settling}");
    fake.clear_calls();
    tokio::time::sleep(EVENTED_RELIST_PERIOD - Duration::from_secs(2)).await;
    assert_eq!(relists(&fake), 0, "no relist without events");
    assert!(health.healthy().is_ok());

    let start = Instant::now();
    fake.exit_container(&b, 1);
    let ev = tokio::time::timeout(Duration::from_millis(10), rx.recv()).await.expect("reported at once");
    assert_eq!(ev.unwrap(), died("b", &b));
    assert_eq!(start.elapsed(), Duration::ZERO);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_events_pending_work_is_looked_at_every_second() {
    let (fake, cache, mut rx, _health, pleg) = on_fake(1000);
    fake.enable_events();
    let (_, c) = running_pod(&fake, "a").await;
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_secs(5)).await;
    while rx.try_recv().is_ok() {}
    fake.clear_calls();

    // The container exits while the pod's worker changes the pod: the relist the event triggers (at 5 s) holds
    // the event for the worker's own inspection and looks again a second later, not 60 s later.
    let guard = cache.syncing(&PodUid::from("a"));
    fake.exit_container(&c, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(rx.try_recv().is_err(), "held while the worker syncs");
    assert_eq!(relists(&fake), 2, "at 5 s and 6 s");
    drop(guard);
    let start = Instant::now();
    let ev = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await.expect("sent at the next relist");
    assert_eq!(ev.unwrap(), died("a", &c));
    assert_eq!(start.elapsed(), Duration::from_millis(500));

    // Nothing pending any more: back to the safety relist.
    fake.clear_calls();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(relists(&fake), 0);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_events_the_pleg_relists_every_second() {
    let (fake, _cache, mut rx, health, pleg) = on_fake(1000);
    let (_, c) = running_pod(&fake, "a").await;
    let (cancel, task) = spawn(pleg);
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(fake.count("GetContainerEvents"), 1, "asked once at start");
    assert_eq!(relists(&fake), 11, "at 0 s, 1 s, ..., 10 s");
    assert_eq!(health.threshold(), RELIST_THRESHOLD);
    while rx.try_recv().is_ok() {}

    let start = Instant::now();
    fake.exit_container(&c, 1);
    let ev = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await.expect("reported by the next relist");
    assert_eq!(ev.unwrap(), died("a", &c));
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(fake.count("GetContainerEvents"), 1, "never asked again");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_events_turned_off_a_streaming_runtime_is_relisted_every_second_and_never_asked() {
    let (fake, _cache, mut rx, health, pleg) = on_fake(1000);
    fake.enable_events();
    let (_, c) = running_pod(&fake, "a").await;
    let (cancel, task) = spawn(pleg.without_events());
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    assert_eq!(fake.count("GetContainerEvents"), 0, "the stream is never opened");
    assert_eq!(relists(&fake), 11, "at 0 s, 1 s, ..., 10 s");
    assert_eq!(health.threshold(), RELIST_THRESHOLD);
    while rx.try_recv().is_ok() {}
    fake.exit_container(&c, 1);
    let ev = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await.expect("reported by the next relist");
    assert_eq!(ev.unwrap(), died("a", &c));
    cancel.cancel();
    task.await.unwrap();
}
