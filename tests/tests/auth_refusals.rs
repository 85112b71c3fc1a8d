//! Refusals before any handler runs, against the real daemon: headers too
//! large for a request (a bearer token of 20 KB, 60 KB, 1 MiB) are refused
//! with a typed status on their own stream while the other streams of the
//! connection go on, and every one of many concurrent unauthenticated
//! `Subscribe` streams is refused with an `ErrorInfo`.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, other_user, probe::Probe, reason, with_token,
};
use stepd_proto::v1::{
    PingRequest, SubscribeRequest, Watch, daemon_service_client::DaemonServiceClient,
    event::Payload, event_service_client::EventServiceClient,
    subscribe_request::Message as SubscribeMessage,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, transport::Channel};
use tonic_types::StatusExt as _;

/// A `Subscribe` call on `channel` with `request`'s metadata: how it was
/// refused, or `None` when it was answered. The client's side stays open
/// (its sender is held) until the answer.
async fn subscribe_status(
    channel: Channel,
    request: impl FnOnce(
        ReceiverStream<SubscribeRequest>,
    ) -> tonic::Request<ReceiverStream<SubscribeRequest>>,
) -> Option<Status> {
    let (tx, rx) = mpsc::channel(1);
    tx.send(SubscribeRequest {
        message: Some(SubscribeMessage::Watch(Watch::default())),
    })
    .await
    .unwrap();
    let call = async {
        let mut inbound = EventServiceClient::new(channel)
            .subscribe(request(ReceiverStream::new(rx)))
            .await?
            .into_inner();
        inbound.message().await.map(|_| ())
    };
    let answer = tokio::time::timeout(DEADLINE, call)
        .await
        .expect("an answer in time");
    drop(tx);
    answer.err()
}

/// What is wrong with a refusal that should be typed, if anything.
fn untyped(status: &Status, codes: &[Code]) -> Option<String> {
    let info = status.get_details_error_info();
    (!codes.contains(&status.code()) || info.is_none()).then(|| {
        format!(
            "{:?} {:?} (ErrorInfo: {:?})",
            status.code(),
            status.message(),
            info.map(|i| i.reason)
        )
    })
}

#[tokio::test]
async fn oversized_headers_are_refused_on_their_own_stream_and_the_connection_lives() {
    let daemon = Daemon::start(&[]).await;
    // One connection: a live probe and a live subscription on it, then the
    // oversized requests on it too.
    let channel = daemon.channel().await;
    let (mut probe, _) =
        Probe::open_on(channel.clone(), stepd_e2e::probe::hello("agent"), "").await;
    let mut sub = Subscription::open(channel.clone(), Watch::default()).await;
    sub.next().await;

    for size in [20_000, 60_000, 1 << 20] {
        let token = "x".repeat(size);
        // Unary.
        let status = DaemonServiceClient::new(channel.clone())
            .ping(with_token(PingRequest::default(), &token))
            .await
            .expect_err("an oversized token is refused");
        assert_eq!(
            untyped(&status, &[Code::ResourceExhausted]),
            None,
            "Ping with a {size}-byte token"
        );
        assert_eq!(reason(&status), "LIMIT_EXCEEDED");
        let info = status.get_details_error_info().unwrap();
        assert_eq!(
            info.metadata.get("limit").map(String::as_str),
            Some("authorization_bytes"),
            "{info:?}"
        );
        assert!(
            status.message().len() < 2048,
            "the refusal does not quote the token"
        );
        // Streaming.
        let status = subscribe_status(channel.clone(), |stream| with_token(stream, &token))
            .await
            .expect("refused");
        assert_eq!(
            untyped(&status, &[Code::ResourceExhausted]),
            None,
            "Subscribe with a {size}-byte token"
        );
    }
    // Another header, not the token: the whole list is bounded.
    let mut request = tonic::Request::new(PingRequest::default());
    request
        .metadata_mut()
        .insert("x-padding", "y".repeat(100_000).parse().unwrap());
    let status = DaemonServiceClient::new(channel.clone())
        .ping(request)
        .await
        .expect_err("100 KB of metadata is refused");
    assert_eq!(untyped(&status, &[Code::ResourceExhausted]), None);
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.metadata["limit"], "header_bytes", "{info:?}");

    // The streams opened before all this still work: the probe is armed and
    // the subscription hears of it.
    let breakpoint = stepd_e2e::probe::arm(&daemon, &mut probe, "tool").await;
    sub.wait_for("the breakpoint's event", |e| {
        matches!(&e.payload, Some(Payload::BreakpointUpdated(b))
            if b.breakpoint.as_ref().is_some_and(|b| b.id == breakpoint))
    })
    .await;
    // And so does the connection, for new calls.
    DaemonServiceClient::new(channel)
        .ping(PingRequest::default())
        .await
        .expect("the connection serves on");
    daemon.stop().await;
}

/// A daemon running as the second test user, so that this test (root) is
/// a peer that is not the daemon's user.
async fn daemon_as_other_user(data: &Path, args: &[&str]) -> Daemon {
    let (uid, gid) = other_user();
    std::os::unix::fs::chown(data, Some(uid), Some(gid)).unwrap();
    let command = Daemon::command_as(uid, gid, data, args);
    Daemon::spawn(command, data).await
}

/// Unauthenticated `Subscribe` streams open at once.
const STREAMS: usize = 200;
/// The daemon's `--first-request-timeout` in the test, and how long the
/// streams keep coming: well past it. A caller that falls silent that long
/// has its connection closed, as it should; at 2 s a caller on a loaded
/// machine, its turn between two streams late, sometimes did.
const FIRST_REQUEST: Duration = Duration::from_secs(5);
const FLOOD: Duration = Duration::from_secs(10);
/// Most streams one caller opens. HTTP/2 allows a connection 1,024 resets
/// made by the server's library (a stream's message arriving after its
/// refusal, say) before it answers GOAWAY ENHANCE_YOUR_CALM, a guard against
/// clients that make a server reset streams; a caller on a connection of
/// its own stays under it however its messages race its refusals.
const MOST_PER_CALLER: usize = 1000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_of_many_unauthenticated_subscribes_carries_error_info() {
    let data = TempDir::new("other");
    let timeout = format!("{}s", FIRST_REQUEST.as_secs());
    let daemon = daemon_as_other_user(data.path(), &["--first-request-timeout", &timeout]).await;
    // Each connection is made as its caller's first stream opens: made
    // ahead, on a loaded machine the first of them could wait past the
    // first-request timeout and be closed for it, which is not a refusal.
    let channels: Vec<_> = (0..STREAMS)
        .map(|_| {
            tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
                .unwrap()
                .connect_lazy()
        })
        .collect();
    let until = Instant::now() + FLOOD;
    let mut callers = tokio::task::JoinSet::new();
    for channel in channels {
        // Each caller keeps one stream open at a time on its connection,
        // opening the next as soon as the last is refused.
        callers.spawn(async move {
            let (mut refused, mut wrong) = (0, Vec::new());
            for _ in 0..MOST_PER_CALLER {
                if Instant::now() >= until {
                    break;
                }
                match subscribe_status(channel.clone(), tonic::Request::new).await {
                    None => wrong.push("answered".to_owned()),
                    Some(status) => match untyped(&status, &[Code::Unauthenticated]) {
                        Some(what) => wrong.push(what),
                        None if reason(&status) != "UNAUTHENTICATED" => {
                            wrong.push(format!("{status:?}"));
                        }
                        None => refused += 1,
                    },
                }
            }
            (refused, wrong)
        });
    }
    let (mut refused, mut wrong) = (0, Vec::new());
    while let Some(done) = callers.join_next().await {
        let (r, w) = done.unwrap();
        refused += r;
        wrong.extend(w);
    }
    assert!(refused >= STREAMS, "{refused} refusals");
    wrong.sort();
    wrong.dedup_by(|a, b| a == b);
    assert!(
        wrong.is_empty(),
        "refusals without ErrorInfo beside {refused} typed ones: {wrong:#?}"
    );
    daemon.stop().await;
}
