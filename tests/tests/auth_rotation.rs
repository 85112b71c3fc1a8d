//! Token expiry and rotation against the real daemon: a token of the tokens
//! file may carry an expiry; an expired token is refused with
//! TOKEN_EXPIRED; edits to the file (a token added, removed, its expiry
//! changed) take effect without a restart; and streams opened with a token
//! that is then revoked or expires are ended with UNAUTHENTICATED, with
//! the reason in `ErrorInfo`, within seconds: a `Subscribe` stream and a
//! probe's `Connect` stream, whose session then ends as on a disconnect.

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, add_token, add_token_with, dap, probe::hello, reason,
    with_token,
};
use stepd_proto::v1::{
    ConnectRequest, EndReason, PingRequest, SubscribeRequest, Watch,
    connect_request::Message as In, connect_response::Message as Out,
    daemon_service_client::DaemonServiceClient, event::Payload,
    event_service_client::EventServiceClient, probe_service_client::ProbeServiceClient,
    subscribe_request::Message as SubscribeMessage,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming, transport::Channel};
use tonic_types::StatusExt as _;

/// How long a test waits for a stream to end once its token went bad.
const WAIT: Duration = Duration::from_secs(10);
/// What the daemon promises (docs/security.md: within 2 s), with room for
/// a loaded machine.
const WITHIN: Duration = Duration::from_secs(7);

/// A Subscribe stream opened with `token`, past its first snapshot. The
/// sender is returned so the stream stays open from the client's side.
async fn subscribe(
    channel: Channel,
    token: &str,
) -> (
    mpsc::Sender<SubscribeRequest>,
    Streaming<stepd_proto::v1::SubscribeResponse>,
) {
    let (tx, rx) = mpsc::channel(8);
    tx.send(SubscribeRequest {
        message: Some(SubscribeMessage::Watch(Watch::default())),
    })
    .await
    .unwrap();
    let mut inbound = EventServiceClient::new(channel)
        .subscribe(with_token(ReceiverStream::new(rx), token))
        .await
        .expect("the token subscribes")
        .into_inner();
    tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .expect("a first event in time")
        .expect("the stream is open")
        .expect("an event");
    (tx, inbound)
}

/// A probe connected with `token`, once welcomed: its sender and stream,
/// and its session.
async fn probe(
    channel: Channel,
    token: &str,
) -> (
    mpsc::Sender<ConnectRequest>,
    Streaming<stepd_proto::v1::ConnectResponse>,
    String,
) {
    let (tx, rx) = mpsc::channel(8);
    tx.send(ConnectRequest {
        message: Some(In::Hello(hello("leased-agent"))),
    })
    .await
    .unwrap();
    let mut inbound = ProbeServiceClient::new(channel)
        .connect(with_token(ReceiverStream::new(rx), token))
        .await
        .expect("the probe token connects")
        .into_inner();
    let message = tokio::time::timeout(DEADLINE, inbound.message())
        .await
        .expect("a Welcome in time")
        .expect("the stream is open")
        .expect("a message");
    let Some(Out::Welcome(welcome)) = message.message else {
        panic!("expected Welcome, got {message:?}");
    };
    (tx, inbound, welcome.session_id)
}

/// How `stream` ended, reading whatever comes before; fails after [`WAIT`]
/// or when it ends with OK.
async fn ended<T>(stream: &mut Streaming<T>, what: &str) -> (Status, Instant) {
    tokio::time::timeout(WAIT, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("{what} ended with OK"),
                Err(status) => return (status, Instant::now()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} was still open {WAIT:?} after its token went bad"))
}

/// Replaces the tokens file with `text` in one rename, as an editor would.
fn rewrite(file: &Path, text: &str) {
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// The file without the lines of the named tokens.
fn without(file: &Path, names: &[&str]) -> String {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|line| {
            !names
                .iter()
                .any(|n| line.split_whitespace().next() == Some(n))
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

fn assert_refused(status: &Status, want: &str, what: &str) {
    assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
    assert_eq!(reason(status), want, "{what}: {status:?}");
}

#[tokio::test]
async fn revoking_or_expiring_a_token_ends_the_streams_it_opened() {
    let dir = TempDir::new("rot");
    let file = dir.path().join("tokens");
    let viewer = add_token(&file, "t-viewer", "viewer");
    let probe_token = add_token(&file, "t-probe", "probe");
    let controller = add_token(&file, "t-controller", "controller");
    let daemon = Daemon::start(&["--auth-tokens", &file.display().to_string()]).await;
    // The daemon's own user watches the probe's session.
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;

    let (_viewer_tx, mut viewer_stream) = subscribe(daemon.channel().await, &viewer).await;
    let (_probe_tx, mut probe_stream, session_id) =
        probe(daemon.channel().await, &probe_token).await;
    let (_controller_tx, mut controller_stream) =
        subscribe(daemon.channel().await, &controller).await;

    // One edit: two tokens revoked, the third given an expiry in the past.
    let past = "expires=2001-01-01T00:00:00Z";
    let text: String = without(&file, &["t-viewer", "t-probe"])
        .lines()
        .map(|line| {
            if line.starts_with("t-controller ") {
                format!("{line} {past}\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    rewrite(&file, &text);
    let edited = Instant::now();

    let (status, at) = ended(&mut viewer_stream, "the viewer's Subscribe stream").await;
    assert_refused(&status, "UNAUTHENTICATED", "revoked, on Subscribe");
    assert!(
        status.message().contains("token:t-viewer") && !status.message().contains(&viewer),
        "names the token's identity, never the token: {status:?}"
    );
    assert!(at - edited <= WITHIN, "{:?} after the edit", at - edited);

    let (status, at) = ended(&mut probe_stream, "the probe's Connect stream").await;
    assert_refused(&status, "UNAUTHENTICATED", "revoked, on Connect");
    assert!(at - edited <= WITHIN, "{:?} after the edit", at - edited);

    let (status, at) = ended(&mut controller_stream, "the controller's Subscribe stream").await;
    assert_refused(&status, "TOKEN_EXPIRED", "expiry moved into the past");
    assert!(
        status.message().contains("2001-01-01T00:00:00Z"),
        "says when: {status:?}"
    );
    assert!(at - edited <= WITHIN, "{:?} after the edit", at - edited);

    // The probe's session ended as on a disconnect.
    let ended = dap::ended(&mut sub, &session_id).await;
    let Some(Payload::SessionEnded(ended)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(
        ended.reason,
        EndReason::ProbeDisconnected as i32,
        "{ended:?}"
    );

    // Nor do the tokens open anything new.
    for (token, want) in [
        (&viewer, "UNAUTHENTICATED"),
        (&probe_token, "UNAUTHENTICATED"),
        (&controller, "TOKEN_EXPIRED"),
    ] {
        let status = DaemonServiceClient::new(daemon.channel().await)
            .ping(with_token(PingRequest::default(), token))
            .await
            .unwrap_err();
        assert_refused(&status, want, "a unary call after the edit");
    }
    daemon.stop().await;
}

/// `stepd token add NAME ROLE --file FILE --expires WHEN`: the token and
/// the expiry its line got.
fn add_expiring(file: &Path, name: &str, role: &str, when: &str) -> (String, SystemTime) {
    let token = add_token_with(file, name, role, &["--expires", when]);
    let text = std::fs::read_to_string(file).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .expect("the token's line");
    let at = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("expires="))
        .unwrap_or_else(|| panic!("no expiry on {line:?}"));
    (token, humantime_rfc3339(at))
}

/// A time as the tokens file writes it.
fn humantime_rfc3339(text: &str) -> SystemTime {
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

#[tokio::test]
async fn a_token_added_later_works_at_once_and_ends_its_stream_when_it_expires() {
    let dir = TempDir::new("exp");
    let file = dir.path().join("tokens");
    add_token(&file, "t-first", "viewer");
    let daemon = Daemon::start(&["--auth-tokens", &file.display().to_string()]).await;
    // Added while the daemon runs: no restart, no signal.
    let (token, expires) = add_expiring(&file, "t-soon", "viewer", "8s");
    let mut ping = DaemonServiceClient::new(daemon.channel().await);
    ping.ping(with_token(PingRequest::default(), &token))
        .await
        .expect("a token added to the file works at once");
    let (_tx, mut stream) = subscribe(daemon.channel().await, &token).await;
    assert!(
        SystemTime::now() < expires,
        "the stream opened before the expiry"
    );

    let (status, _) = ended(&mut stream, "the expiring token's Subscribe stream").await;
    let now = SystemTime::now();
    assert_refused(&status, "TOKEN_EXPIRED", "expired, on Subscribe");
    assert!(now >= expires, "not before the expiry");
    let late = now.duration_since(expires).unwrap();
    assert!(late <= WITHIN, "{late:?} after the expiry");

    // A unary call with it now: TOKEN_EXPIRED, saying when, never the token.
    let status = ping
        .ping(with_token(PingRequest::default(), &token))
        .await
        .unwrap_err();
    assert_refused(&status, "TOKEN_EXPIRED", "expired, on Ping");
    let info = status.get_details_error_info().expect("ErrorInfo");
    let at = info.metadata.get("expired_at").expect("expired_at").clone();
    assert_eq!(humantime_rfc3339(&at), expires);
    assert!(status.message().contains(&at), "{status:?}");
    assert!(!status.message().contains(&token), "{status:?}");
    assert_eq!(info.metadata.get("identity").unwrap(), "token:t-soon");
    daemon.stop().await;
}
