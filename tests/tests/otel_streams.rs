//! A stream's RPC span lasts the stream's life, against a real Jaeger: a
//! `Subscribe` and a probe's `Connect` kept open for a measured time are
//! server spans at least that long, in the caller's trace, ended with the
//! status the stream ended with.

use std::time::{Duration, Instant};

use serde_json::Value as Json;
use stepd_e2e::{
    Subscription, TempDir, dap,
    jaeger::{Jaeger, caller_context, find, operation, parent_of, tag, traced_daemon},
    probe::connect_probe,
};
use stepd_proto::v1::{
    SubscribeRequest, Watch, event_service_client::EventServiceClient, subscribe_request::Message,
};
use tokio_stream::wrappers::ReceiverStream;

/// How long each stream is kept open: long enough that a span ended when
/// the call returned (the stream's first answer) is far shorter.
const KEPT: Duration = Duration::from_millis(1500);

/// The duration Jaeger gives a span (it counts microseconds).
fn duration(span: &Json) -> Duration {
    Duration::from_micros(span["duration"].as_u64().unwrap())
}

#[tokio::test]
async fn subscribe_and_connect_spans_last_as_long_as_their_streams() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-streams");
    let daemon = traced_daemon(&dir, &jaeger, "stepd-otel-streams").await;

    // A Subscribe in the caller's trace, open from its snapshot until it
    // is dropped: the span began before the snapshot came and ends after.
    let (traceparent, trace, parent) = caller_context(0x61);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(SubscribeRequest {
        message: Some(Message::Watch(Watch::default())),
    })
    .await
    .unwrap();
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let mut stream = EventServiceClient::new(daemon.channel().await)
        .subscribe(request)
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().expect("the snapshot");
    let open_from = Instant::now();
    // The stream is left open for a while: the length measured, not a
    // wait for anything.
    tokio::time::sleep(KEPT).await;
    let open = open_from.elapsed();
    drop((stream, tx));

    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| operation(s) == "stepd.v1.EventService/Subscribe").is_some()
        })
        .await;
    let subscribe = find(&spans, |s| {
        operation(s) == "stepd.v1.EventService/Subscribe"
    })
    .unwrap();
    assert_eq!(parent_of(subscribe), Some(parent.as_str()), "{subscribe:#}");
    assert_eq!(tag(subscribe, "span.kind"), Some(&Json::from("server")));
    assert!(
        duration(subscribe) >= open,
        "the stream was open {open:?}, its span lasted {:?}: {subscribe:#}",
        duration(subscribe)
    );
    // The client went away: the stream ended CANCELLED, and says so.
    assert_eq!(
        tag(subscribe, "rpc.response.status_code"),
        Some(&Json::from("CANCELLED")),
        "{subscribe:#}"
    );

    // A probe's Connect, open from its Welcome until the probe goes.
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let (traceparent, trace, parent) = caller_context(0x62);
    let probe = connect_probe(&daemon, &traceparent).await;
    let session = probe.session_id.clone();
    let open_from = Instant::now();
    tokio::time::sleep(KEPT).await;
    let open = open_from.elapsed();
    drop(probe);
    dap::ended(&mut sub, &session).await;

    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| operation(s) == "stepd.v1.ProbeService/Connect").is_some()
        })
        .await;
    let connect = find(&spans, |s| operation(s) == "stepd.v1.ProbeService/Connect").unwrap();
    assert_eq!(parent_of(connect), Some(parent.as_str()), "{connect:#}");
    assert!(
        duration(connect) >= open,
        "the probe was connected {open:?}, its Connect span lasted {:?}",
        duration(connect)
    );
    daemon.stop().await;
}
