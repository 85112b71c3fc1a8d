//! A probe spoken to over the raw ProbeService stream, for tests that need
//! one without a probe library: it says Hello, hears its breakpoints armed
//! and holds at `tool_call` points.

use stepd_proto::v1::{
    BreakpointSpec, ConnectRequest, ConnectResponse, Hello, Hit, PointInfo, ProbeCapabilities,
    ProbeMatch, breakpoint_spec::Location, connect_request::Message as In,
    connect_response::Message as Out, probe_service_client::ProbeServiceClient,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::{DEADLINE, Daemon, dap};

/// A probe connected over a raw stream.
pub struct Probe {
    /// What the probe sends.
    pub tx: mpsc::Sender<ConnectRequest>,
    /// What the daemon sends it.
    pub rx: Streaming<ConnectResponse>,
    /// Its session.
    pub session_id: String,
}

/// A probe named `traced-agent` connected with `traceparent` on its
/// Connect call (none if empty), once welcomed.
pub async fn connect_probe(daemon: &Daemon, traceparent: &str) -> Probe {
    connect_with(daemon, hello("traced-agent"), traceparent).await
}

/// The Hello of a probe named `name` that can do everything.
pub fn hello(name: &str) -> Hello {
    Hello {
        name: name.into(),
        language: "test".into(),
        pid: i64::from(std::process::id()),
        capabilities: Some(ProbeCapabilities {
            eval: true,
            skip: true,
            edit: true,
        }),
        ..Default::default()
    }
}

/// A probe that says `hello`, connected with `traceparent` on its Connect
/// call (none if empty), once welcomed.
pub async fn connect_with(daemon: &Daemon, hello: Hello, traceparent: &str) -> Probe {
    let (tx, rx) = mpsc::channel(16);
    tx.send(ConnectRequest {
        message: Some(In::Hello(hello)),
    })
    .await
    .unwrap();
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if !traceparent.is_empty() {
        request
            .metadata_mut()
            .insert("traceparent", traceparent.parse().unwrap());
    }
    let mut rx = ProbeServiceClient::new(daemon.channel().await)
        .connect(request)
        .await
        .unwrap()
        .into_inner();
    let welcome = match next(&mut rx).await {
        Out::Welcome(w) => w,
        other => panic!("expected Welcome, got {other:?}"),
    };
    Probe {
        tx,
        rx,
        session_id: welcome.session_id,
    }
}

/// The next message the daemon sends a probe, within the deadline.
pub async fn next(rx: &mut Streaming<ConnectResponse>) -> Out {
    tokio::time::timeout(DEADLINE, rx.message())
        .await
        .expect("a message from the daemon in time")
        .unwrap()
        .expect("the stream is open")
        .message
        .unwrap()
}

/// Arms a breakpoint on `tool_call` points named `name` and waits for the
/// probe to hear of it.
pub async fn arm(daemon: &Daemon, probe: &mut Probe, name: &str) -> String {
    let id = dap::add_breakpoint(
        daemon,
        BreakpointSpec {
            location: Some(Location::Probe(ProbeMatch {
                point_kind: "tool_call".into(),
                name_glob: name.into(),
            })),
            ..Default::default()
        },
    )
    .await;
    let Out::Armed(_) = next(&mut probe.rx).await else {
        panic!("expected Armed")
    };
    id
}

/// Holds at a `tool_call` point, the program's span being `traceparent`
/// (none if empty).
pub async fn hold(probe: &Probe, hit_id: &str, name: &str, breakpoint: &str, traceparent: &str) {
    probe
        .tx
        .send(ConnectRequest {
            message: Some(In::Hit(Hit {
                hit_id: hit_id.into(),
                point: Some(PointInfo {
                    kind: "tool_call".into(),
                    name: name.into(),
                    ..Default::default()
                }),
                coor: vec![0],
                breakpoint_ids: vec![breakpoint.to_owned()],
                traceparent: traceparent.into(),
                ..Default::default()
            })),
        })
        .await
        .unwrap();
}
