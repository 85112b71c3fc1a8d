//! A probe spoken to over the raw ProbeService stream, for tests that need
//! one without a probe library: it says Hello, hears its breakpoints armed,
//! holds at points and sends whatever else a test needs. (`probe_limits.rs`
//! speaks HTTP/2 itself, to control its frames; this one is for the rest.)

use prost_types::Value;
use stepd_proto::v1::{
    Armed, BreakpointSpec, ConnectRequest, ConnectResponse, Hello, Hit, PointInfo,
    ProbeCapabilities, ProbeMatch, Welcome, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out,
    probe_service_client::ProbeServiceClient,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Streaming, transport::Channel};

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

impl Probe {
    /// A probe that says `hello`, connected with `traceparent` on its
    /// Connect call (none if empty), and the Welcome it got.
    pub async fn open(daemon: &Daemon, hello: Hello, traceparent: &str) -> (Self, Welcome) {
        Self::open_on(daemon.channel().await, hello, traceparent).await
    }

    /// As `open`, on a channel of the caller's (TLS, a proxy).
    pub async fn open_on(channel: Channel, hello: Hello, traceparent: &str) -> (Self, Welcome) {
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
        let mut rx = ProbeServiceClient::new(channel)
            .connect(request)
            .await
            .unwrap()
            .into_inner();
        let welcome = match next(&mut rx).await {
            Out::Welcome(w) => w,
            other => panic!("expected Welcome, got {other:?}"),
        };
        let probe = Self {
            tx,
            rx,
            session_id: welcome.session_id.clone(),
        };
        (probe, welcome)
    }

    /// A probe named "agent" with `labels`, once welcomed, and what it was
    /// armed with.
    pub async fn connect(daemon: &Daemon, labels: &[(&str, &str)]) -> (Self, Armed) {
        Self::connect_with(daemon, labels, "").await
    }

    /// As `connect`, naming the session of a previous connection when
    /// `resume` is set.
    pub async fn connect_with(
        daemon: &Daemon,
        labels: &[(&str, &str)],
        resume: &str,
    ) -> (Self, Armed) {
        let hello = Hello {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            resume_session_id: resume.into(),
            ..hello("agent")
        };
        let (probe, welcome) = Self::open(daemon, hello, "").await;
        (probe, welcome.armed.unwrap_or_default())
    }

    /// Holds at a point of `kind` named `name` carrying `value`, inside
    /// `scope` (its names, outermost first).
    pub async fn hit(&self, id: &str, kind: &str, name: &str, value: Value, scope: &[&str]) {
        self.send(In::Hit(Hit {
            hit_id: id.into(),
            point: Some(PointInfo {
                kind: kind.into(),
                name: name.into(),
                payload: Some(value),
                editable: true,
                type_hint: "dict".into(),
                scope_path: scope.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            coor: vec![0; scope.len().max(1)],
            ..Default::default()
        }))
        .await;
    }

    /// Sends one message.
    pub async fn send(&self, message: In) {
        self.tx
            .send(ConnectRequest {
                message: Some(message),
            })
            .await
            .unwrap();
    }
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
    Probe::open(daemon, hello, traceparent).await.0
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
                ..Default::default()
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
        .send(In::Hit(Hit {
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
        }))
        .await;
}
