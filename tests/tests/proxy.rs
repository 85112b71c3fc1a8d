//! Streams through a real L7 proxy: HAProxy proxying gRPC (h2c both sides)
//! with 5 s client, server and tunnel timeouts. Heartbeats shorter than that
//! keep a held probe and a quiet Subscribe open; longer ones let the proxy
//! cut the stream, which shows the proxy really would.

use std::time::Duration;

use stepd_e2e::{
    Daemon, Subscription, dap,
    haproxy::Haproxy,
    held::{bash_breakpoint, both_held, held, inject, programs},
};
use stepd_proto::v1::{
    ListPausesRequest, Watch, event::Payload, session_service_client::SessionServiceClient,
};
use tonic::transport::Channel;

/// The proxy's idle timeouts.
const PROXY_IDLE: Duration = Duration::from_secs(5);

async fn through(proxy: &Haproxy) -> Channel {
    Channel::from_shared(format!("http://{}", proxy.addr))
        .expect("valid uri")
        .connect()
        .await
        .expect("connect through haproxy")
}

/// Reads `sub` for `quiet`; true when the stream stayed open (only
/// heartbeats came), counting them in `heartbeats`.
async fn stays_open(sub: &mut Subscription, quiet: Duration, heartbeats: &mut usize) -> bool {
    let open = tokio::time::timeout(quiet, async {
        // A cut shows as an error (no grpc-status trailer) or an end.
        while let Ok(Some(event)) = sub.next_or_error().await {
            assert!(
                matches!(event.payload, Some(Payload::Heartbeat(_))),
                "only heartbeats while quiet: {event:?}"
            );
            *heartbeats += 1;
        }
    })
    .await;
    open.is_err()
}

#[tokio::test]
async fn a_quiet_subscribe_through_haproxy_stays_open_for_a_minute() {
    let daemon = Daemon::start(&["--heartbeat-interval", "2s"]).await;
    let proxy = Haproxy::start(&daemon.addr, PROXY_IDLE).await;
    let mut sub = Subscription::open(through(&proxy).await, Watch::default()).await;
    assert!(matches!(
        sub.next().await.payload,
        Some(Payload::Snapshot(_))
    ));
    let mut heartbeats = 0;
    assert!(
        stays_open(&mut sub, Duration::from_secs(60), &mut heartbeats).await,
        "the stream ended after {heartbeats} heartbeats"
    );
    assert!(heartbeats >= 25, "{heartbeats} heartbeats in a minute");
    // Still delivering: a change made now arrives.
    dap::add_breakpoint(&daemon, bash_breakpoint()).await;
    sub.wait_for("the new breakpoint", |e| {
        matches!(e.payload, Some(Payload::BreakpointUpdated(_)))
    })
    .await;
}

#[tokio::test]
async fn haproxy_cuts_a_subscribe_whose_heartbeats_are_longer_than_its_timeout() {
    let daemon = Daemon::start(&["--heartbeat-interval", "30s"]).await;
    let proxy = Haproxy::start(&daemon.addr, PROXY_IDLE).await;
    let mut sub = Subscription::open(through(&proxy).await, Watch::default()).await;
    assert!(matches!(
        sub.next().await.payload,
        Some(Payload::Snapshot(_))
    ));
    let mut heartbeats = 0;
    assert!(
        !stays_open(&mut sub, Duration::from_secs(20), &mut heartbeats).await,
        "the proxy did not cut a stream quiet for 20 s"
    );
}

#[tokio::test]
async fn probes_held_30_s_through_haproxy_keep_their_holds() {
    let daemon = Daemon::start(&["--heartbeat-interval", "2s"]).await;
    let proxy = Haproxy::start(&daemon.addr, PROXY_IDLE).await;
    dap::add_breakpoint(&daemon, bash_breakpoint()).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    // The probes send their own heartbeats every 2 s.
    let (mut python, mut go) = programs(&proxy.addr, &["--heartbeat", "2"]);
    let pauses = both_held(&mut sub, &mut python, &mut go).await;
    // For 30 s nothing ends: no stream was cut (a cut would end the
    // session, and the re-reported hold would be a new pause).
    let quiet = tokio::time::timeout(
        Duration::from_secs(30),
        sub.wait_for("a session or pause ending", |e| {
            matches!(
                e.payload,
                Some(Payload::SessionEnded(_) | Payload::PauseResolved(_))
            )
        }),
    )
    .await;
    assert!(quiet.is_err(), "something ended while held: {quiet:?}");
    for (pause, lang) in pauses.iter().zip(["python", "go"]) {
        inject(&daemon, pause, lang).await;
    }
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "injected", "lang": "python"}"#
    );
    assert_eq!(go.line().await, r#"result {"cmd":"injected","lang":"go"}"#);
}

#[tokio::test]
async fn haproxy_cuts_a_held_probe_whose_heartbeats_are_longer_than_its_timeout() {
    let daemon = Daemon::start(&["--heartbeat-interval", "30s"]).await;
    let proxy = Haproxy::start(&daemon.addr, PROXY_IDLE).await;
    dap::add_breakpoint(&daemon, bash_breakpoint()).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let (mut python, mut go) = programs(&proxy.addr, &["--heartbeat", "30"]);
    let [first, _] = both_held(&mut sub, &mut python, &mut go).await;
    // Within the deadline, long before the 30 s heartbeat.
    sub.wait_for("the cut stream's session to end", |e| {
        e.session_id == first.session_id && matches!(e.payload, Some(Payload::SessionEnded(_)))
    })
    .await;
    // Both programs kept waiting, reconnected through the proxy and
    // re-reported their holds: one pause each, answered there.
    let again = held(&mut sub).await;
    assert_ne!(again[0].session_id, first.session_id);
    let listed = SessionServiceClient::new(daemon.channel().await)
        .list_pauses(ListPausesRequest::default())
        .await
        .expect("list pauses")
        .into_inner()
        .pauses;
    assert_eq!(listed.len(), 2, "one pause per program: {listed:#?}");
    for (pause, lang) in again.iter().zip(["python", "go"]) {
        inject(&daemon, pause, lang).await;
    }
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "injected", "lang": "python"}"#
    );
    assert_eq!(go.line().await, r#"result {"cmd":"injected","lang":"go"}"#);
}
