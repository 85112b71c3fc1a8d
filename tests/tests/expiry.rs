//! Breakpoints with `expires_at`: announced when they expire, and from then
//! on applied nowhere — not in a running DAP session, not in a probe.

use std::time::{Duration, Instant, SystemTime};

use prost_types::Timestamp;
use stepd_e2e::{
    DEADLINE, Daemon, dap, fixture, line_of, reason, source_spec, violated_fields, watched,
};
use stepd_proto::v1::{
    BreakpointChange, BreakpointSpec, ConnectRequest, EndReason, Event, Hello, Hit, PointInfo,
    ProbeMatch, ResumeDecision, UpdateBreakpointRequest,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out, event::Payload,
    probe_service_client::ProbeServiceClient,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// A time `secs` seconds from now.
fn in_secs(secs: u64) -> Timestamp {
    let at = SystemTime::now() + Duration::from_secs(secs);
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    Timestamp {
        seconds: since.as_secs() as i64,
        // Whole seconds would put it anywhere from 0 to 1 s earlier.
        nanos: since.subsec_nanos() as i32,
    }
}

/// Sets breakpoint `id` to expire a second from now. The daemon refuses an
/// expiry already past, so where the second has gone by before the update
/// arrives (a slow machine), it is asked again with a fresh second.
async fn expire_soon(daemon: &Daemon, id: &str) {
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let deadline = Instant::now() + DEADLINE;
    loop {
        let update = UpdateBreakpointRequest {
            id: id.into(),
            spec: Some(BreakpointSpec {
                expires_at: Some(in_secs(1)),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["expires_at".into()],
            }),
        };
        match client.update_breakpoint(update).await {
            Ok(_) => return,
            Err(status)
                if reason(&status) == "INVALID_ARGUMENT"
                    && violated_fields(&status) == ["spec.expires_at"]
                    && Instant::now() < deadline => {}
            Err(status) => panic!("expires_at a second from now: {status:?}"),
        }
    }
}

fn is_expired(event: &Event, id: &str) -> bool {
    matches!(&event.payload, Some(Payload::BreakpointUpdated(u))
        if u.change == BreakpointChange::Expired as i32
            && u.breakpoint.as_ref().is_some_and(|b| b.id == id && b.spent))
}

#[tokio::test]
async fn an_expired_breakpoint_no_longer_stops_a_running_program() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let spec = source_spec(program.to_str().unwrap(), line_of(&program, "step"));
    let bp = dap::add_breakpoint(&daemon, spec).await;
    let session = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let first = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(dap::local(&first, "i"), "0");
    // Applied in the running session; now it is to expire in a second,
    // however long the launch took.
    expire_soon(&daemon, &bp).await;
    sub.wait_for("the expiry", |e| is_expired(e, &bp)).await;
    // The other four iterations run through the line without a stop.
    let mut sessions = dap::sessions(&daemon).await;
    dap::resume(&mut sessions, &session.id).await;
    let end = sub
        .wait_for("the end or another stop", |e| {
            e.session_id == session.id
                && matches!(
                    e.payload,
                    Some(Payload::SessionEnded(_) | Payload::Stopped(_))
                )
        })
        .await;
    let Some(Payload::SessionEnded(ended)) = end.payload else {
        panic!("stopped after the expiry: {end:?}")
    };
    assert_eq!(ended.reason, EndReason::Exited as i32);
    assert!(
        dap::output_text(&daemon, &session.id)
            .await
            .contains("done total=20")
    );
    daemon.stop().await;
}

#[tokio::test]
async fn an_expired_probe_breakpoint_disarms_and_holds_nothing() {
    let (daemon, mut sub) = watched().await;
    let bp = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            location: Some(Location::Probe(ProbeMatch {
                point_kind: "tool_call".into(),
                name_glob: "*".into(),
                ..Default::default()
            })),
            // Far enough for the probe to be armed with it first, however
            // slow the machine; then it is made to expire soon.
            expires_at: Some(in_secs(3600)),
            ..Default::default()
        },
    )
    .await;
    let (tx, rx) = mpsc::channel(16);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "agent".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut probe = ProbeServiceClient::new(daemon.channel().await)
        .connect(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        tokio::time::timeout(stepd_e2e::DEADLINE, probe.message())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("the stream is open")
            .message
            .unwrap()
    };
    let Out::Welcome(welcome) = next().await else {
        panic!("expected Welcome")
    };
    assert_eq!(welcome.armed.unwrap().matchers.len(), 1);

    expire_soon(&daemon, &bp).await;
    // The update re-arms the probe with the breakpoint as changed.
    let Out::Armed(armed) = next().await else {
        panic!("expected the arming of the update")
    };
    assert_eq!(armed.matchers.len(), 1, "{armed:?}");
    sub.wait_for("the expiry", |e| is_expired(e, &bp)).await;
    let Out::Armed(armed) = next().await else {
        panic!("expected a new arming")
    };
    assert!(armed.matchers.is_empty(), "{armed:?}");
    // A probe that hit it before hearing of the expiry is let go at once.
    tx.send(ConnectRequest {
        message: Some(In::Hit(Hit {
            hit_id: "late".into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                ..Default::default()
            }),
            breakpoint_ids: vec![bp.clone()],
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let Out::Resume(resume) = next().await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "late");
    assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    daemon.stop().await;
}
